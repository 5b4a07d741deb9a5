"""Checks of what a plugin's registration map says about prompts, tools and output
extensions' schemas, at load.

A prompt addition with a bad position or no content, a `when` the assembler cannot
evaluate, or tool guidance that is not lists of tool names would otherwise be
dropped silently each time a prompt is assembled; here it is a load error naming
the plugin and the field; so is an output extension's `output_schema` that does not
compile or is over a schema cap. Whether a named tool exists is judged where tools are
known (the session's catalog, see `hooks.extensions.tool_guidance`): MCP servers
and the application add theirs after plugins load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wasmext.errors import ConfigError
from wasmext.services.tools import NAME_RE, bounded_schema, compile_schema
from wasmext.text import clean

__all__ = ["MAX_ADDITIONS", "MAX_ADDITION_CHARS", "POSITIONS", "registration_problems"]

POSITIONS = ("system_prefix", "system_suffix", "user_prefix", "user_suffix")
CONDITIONS = ("tag_present", "state_equals", "context_match")
GUIDANCE_KEYS = ("preferred", "avoided", "order")
MAX_ADDITIONS = 64
MAX_ADDITION_CHARS = 16_384
MAX_GUIDED_TOOLS = 256
MAX_PATTERN_CHARS = 1_024


def registration_problems(extra: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every problem of `extra`'s "prompt" and "tool_guidance" as (field, why)."""
    problems: list[tuple[str, str]] = []
    if "prompt" in extra:
        problems += _prompt(extra["prompt"])
    if "tool_guidance" in extra:
        problems += _guidance(extra["tool_guidance"])
    if isinstance(extra.get("output_extensions"), list):
        problems += _output_schemas(extra["output_extensions"])
    return problems


def _output_schemas(decls: list[Any]) -> list[tuple[str, str]]:
    """An output extension's `output_schema` must be a JSON Schema that compiles, within
    the caps of a tool's schema (it is compiled once and checks every result)."""
    out = []
    for i, decl in enumerate(decls):
        if not isinstance(decl, dict) or decl.get("output_schema") is None:
            continue
        where = f"output_extensions[{i}].output_schema"
        try:
            bounded_schema(decl["output_schema"], where, "output_schema")
            compile_schema(decl["output_schema"], where)
        except ConfigError as err:
            out.append((where, clean(err.message.removeprefix(f"{where}: "), 200)))
    return out


def _prompt(raw: Any) -> list[tuple[str, str]]:
    if not isinstance(raw, list) or len(raw) > MAX_ADDITIONS:
        return [("prompt", f"must be an array of at most {MAX_ADDITIONS} additions")]
    out = []
    for i, add in enumerate(raw):
        where = f"prompt[{i}]"
        if not isinstance(add, dict):
            out.append((where, "must be a map with position and content"))
            continue
        unknown = sorted(str(k) for k in set(add) - {"position", "content", "when"})
        if unknown:
            out.append((f"{where}.{clean(unknown[0], 64)}", "unknown field"))
        if add.get("position") not in POSITIONS:
            out.append((f"{where}.position", f"must be one of {', '.join(POSITIONS)}"))
        content = add.get("content")
        if not isinstance(content, str) or not content:
            out.append((f"{where}.content", "must be a non-empty string"))
        elif len(content) > MAX_ADDITION_CHARS:
            out.append((f"{where}.content", f"must be at most {MAX_ADDITION_CHARS} characters"))
        if add.get("when") is not None:
            why = _condition(add["when"])
            if why is not None:
                out.append((f"{where}.when", why))
    return out


def _condition(when: Any) -> str | None:
    if not isinstance(when, dict) or len(when) != 1:
        return f"must be a map with one of {', '.join(CONDITIONS)}"
    (kind, arg), = when.items()
    if kind == "tag_present":
        return None if isinstance(arg, str) and arg else "tag_present needs a tag name"
    if kind == "state_equals":
        return None if isinstance(arg, dict) and isinstance(arg.get("key"), str) \
            else "state_equals needs {key, value}"
    if kind == "context_match":
        if not isinstance(arg, dict) or not isinstance(arg.get("key"), str) \
                or not isinstance(arg.get("pattern"), str):
            return "context_match needs {key, pattern}"
        if len(arg["pattern"]) > MAX_PATTERN_CHARS:
            return f"context_match's pattern must be at most {MAX_PATTERN_CHARS} characters"
        try:
            # The engine that matches it (linear time: `hooks.extensions.context_matches`).
            compile_schema({"type": "string", "pattern": arg["pattern"]}, "context_match")
        except ConfigError:
            return ("context_match's pattern is not a regular expression of the linear-time "
                    "engine (no lookaround, no backreferences)")
        return None
    return f"unknown condition {clean(str(kind), 64)!r} (one of {', '.join(CONDITIONS)})"


def _guidance(raw: Any) -> list[tuple[str, str]]:
    if not isinstance(raw, dict):
        return [("tool_guidance", f"must be a map of {', '.join(GUIDANCE_KEYS)}")]
    out = []
    for key in sorted(str(k) for k in set(raw) - set(GUIDANCE_KEYS)):
        out.append((f"tool_guidance.{clean(key, 64)}", "unknown field"))
    for key in GUIDANCE_KEYS:
        names = raw.get(key, [])
        if not isinstance(names, list) or len(names) > MAX_GUIDED_TOOLS:
            out.append((f"tool_guidance.{key}",
                        f"must be an array of at most {MAX_GUIDED_TOOLS} tool names"))
            continue
        for i, name in enumerate(names):
            if not isinstance(name, str) or not NAME_RE.match(name):
                out.append((f"tool_guidance.{key}[{i}]", "is not a tool name "
                            "(1-64 letters, digits, '_' or '-')"))
    return out
