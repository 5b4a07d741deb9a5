"""Output extensions (`#name[:param]`), prompt additions and tool guidance.

Output extensions run after the answer, in the order the query asked for
them; each sees every earlier result, and a failure marks only its own result
failed: the answer is never touched. A plugin may declare its extensions in
its registration map (`"output_extensions": [{"name", "allowed_params",
"content_type"}]`): a param outside `allowed_params` is an error result and the
plugin is not called. A `#name` (starting with a letter) that no plugin
serves is an error result too, and is stripped from the query like the others.
Each result carries its duration, the model tokens and cost the plugin used
through llm.complete during the call, and a content type, and is emitted as
the runtime event `extension.result`. Prompt additions and tool guidance come
from the registration map ("prompt", "tool_guidance") and are assembled in
plugin-id order, so the prompt is the same whatever order plugins loaded in.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wasmext.hooks.tags import matches

if TYPE_CHECKING:
    from wasmext.hooks.context import HookSession

__all__ = ["ExtensionResult", "Prompt", "ToolGuidance", "assemble_prompt",
           "parse_requests", "run_output_extensions", "tool_guidance"]

_REQUEST = re.compile(r"(?<![\w#&])#([a-z0-9][a-z0-9_-]{0,63})(?::([\w.\-]{1,64}))?(?![\w-])")
POSITIONS = ("system_prefix", "system_suffix", "user_prefix", "user_suffix")


@dataclass
class ExtensionResult:
    name: str
    param: str | None
    content: Any = None
    success: bool = True
    error: str | None = None
    plugin_id: str | None = None
    content_type: str = "application/json"
    duration_ms: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)  # model tokens: input, output
    cost: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "param": self.param, "content": self.content,
                "success": self.success, "error": self.error, "plugin": self.plugin_id,
                "content_type": self.content_type, "duration_ms": self.duration_ms,
                "usage": dict(self.usage), "cost": self.cost}


def parse_requests(query: str, known: set[str]) -> tuple[str, list[tuple[str, str | None]]]:
    """(query without the requests, [(name, param)]) for names in `known`."""
    found: list[tuple[str, str | None]] = []

    def strip(m: re.Match[str]) -> str:
        if m.group(1) not in known:
            return m.group(0)
        found.append((m.group(1), m.group(2)))
        return ""

    clean = _REQUEST.sub(strip, query)
    return re.sub(r"[ \t]{2,}", " ", clean).strip(), found


def _declared(session: HookSession, plugin_id: str, name: str) -> dict[str, Any]:
    lp = session.host.plugins.get(plugin_id)
    decls = lp.plugin.registration.extra.get("output_extensions") if lp else None
    for decl in decls if isinstance(decls, list) else []:
        if isinstance(decl, dict) and decl.get("name") == name:
            return decl
    return {}


def _llm_used(session: HookSession, plugin_id: str) -> tuple[dict[str, int], float]:
    llm = getattr(session.host, "llm", None)  # a host without llm.complete reports none
    if llm is None:
        return {}, 0.0
    used = llm.usage(plugin_id)
    return dict(used["tokens"]), float(used["cost"])


def _run_one(session: HookSession, entry: Any, outcome: ExtensionResult,
             data: dict[str, Any]) -> None:
    decl = _declared(session, entry.plugin_id, outcome.name)
    allowed = decl.get("allowed_params")
    if isinstance(allowed, list) and outcome.param is not None and outcome.param not in allowed:
        outcome.success = False
        outcome.error = f"param {outcome.param!r} is not allowed for #{outcome.name}"
        return
    tokens_before, cost_before = _llm_used(session, entry.plugin_id)
    started = time.perf_counter()
    result, error = session.host.try_call(entry.plugin_id, "output_extension", data, session)
    outcome.duration_ms = round((time.perf_counter() - started) * 1000, 3)
    tokens_after, cost_after = _llm_used(session, entry.plugin_id)
    used = {k: tokens_after.get(k, 0) - tokens_before.get(k, 0) for k in ("input", "output")}
    if any(used.values()):
        outcome.usage, outcome.cost = used, round(cost_after - cost_before, 9)
    if error is not None:
        outcome.success, outcome.error = False, error
    elif result is not None:
        outcome.content = result.value if result.changed else None
    declared_type = decl.get("content_type")
    outcome.content_type = declared_type if isinstance(declared_type, str) else \
        "text/plain" if isinstance(outcome.content, str) else "application/json"


def run_output_extensions(session: HookSession, query: str, answer: str
                          ) -> tuple[str, list[ExtensionResult]]:
    entries = session.host.ordered("output_extension")
    requested = {m.group(1) for m in _REQUEST.finditer(query)}
    served = {name for name in requested if any(matches(e.pattern, name) for e in entries
                                                if e.pattern)}
    unknown = {name for name in requested - served if name[0].isalpha()}
    clean, requests = parse_requests(query, served | unknown)
    results: list[ExtensionResult] = []
    for name, param in requests:
        entry = next((e for e in entries if e.pattern and matches(e.pattern, name)), None)
        if entry is None:
            results.append(ExtensionResult(name, param, success=False,
                                           error=f"no output extension #{name}"))
        else:
            outcome = ExtensionResult(name, param, plugin_id=entry.plugin_id)
            data = {"name": name, "param": param, "answer": answer, "query": clean,
                    "previous": {r.name: r.as_dict() for r in results}}
            _run_one(session, entry, outcome, data)
            results.append(outcome)
        done = results[-1]
        session.host.observe.bus.emit_runtime(
            "extension.result", session_id=session.id, name=done.name, param=done.param,
            plugin_id=done.plugin_id, success=done.success, error=done.error,
            content_type=done.content_type, duration_ms=done.duration_ms,
            usage=dict(done.usage), cost=done.cost)
    return clean, results


@dataclass
class Prompt:
    system: str
    user: str
    applied: list[tuple[str, str]] = field(default_factory=list)  # (plugin id, position)


def _condition(session: HookSession, when: Any, tags: Sequence[str],
               context: dict[str, Any]) -> bool:
    if when is None:
        return True
    if not isinstance(when, dict) or len(when) != 1:
        return False
    (kind, arg), = when.items()
    if kind == "tag_present":
        return isinstance(arg, str) and arg in tags
    if kind == "state_equals" and isinstance(arg, dict):
        return "key" in arg and session.state.get(arg["key"]) == arg.get("value")
    if kind == "context_match" and isinstance(arg, dict) and isinstance(arg.get("pattern"), str):
        try:
            value = context.get(str(arg.get("key")), "")
            return re.search(arg["pattern"], str(value)) is not None
        except re.error:
            return False
    return False


def assemble_prompt(session: HookSession, system: str, user: str, tags: Sequence[str],
                    context: dict[str, Any]) -> Prompt:
    parts: dict[str, list[str]] = {p: [] for p in POSITIONS}
    prompt = Prompt(system, user)
    for pid in sorted(session.host.plugins):
        additions = session.host.plugins[pid].plugin.registration.extra.get("prompt", [])
        for add in additions if isinstance(additions, list) else []:
            if not isinstance(add, dict) or add.get("position") not in POSITIONS \
                    or not isinstance(add.get("content"), str):
                session.trace.note("prompt", "failed", "malformed prompt addition", pid)
                continue
            if _condition(session, add.get("when"), tags, context):
                parts[add["position"]].append(add["content"])
                prompt.applied.append((pid, add["position"]))
    prompt.system = "\n".join(x for x in [*parts["system_prefix"], system,
                                          *parts["system_suffix"]] if x)
    prompt.user = "".join(parts["user_prefix"]) + user + "".join(parts["user_suffix"])
    return prompt


@dataclass
class ToolGuidance:
    tools: list[str]
    preferred: list[str] = field(default_factory=list)
    avoided: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The guidance as a note for the model (advice, never a block)."""
        lines = []
        if self.preferred:
            lines.append("Prefer these tools: " + ", ".join(self.preferred) + ".")
        if self.avoided:
            lines.append("Avoid these tools unless necessary: " + ", ".join(self.avoided) + ".")
        if self.order:
            lines.append("When using several, a good order is: " + " -> ".join(self.order) + ".")
        return "\n".join(lines)


def tool_guidance(session: HookSession, tools: Sequence[str]) -> ToolGuidance:
    available = list(tools)
    g = ToolGuidance(available)
    for pid in sorted(session.host.plugins):
        raw = session.host.plugins[pid].plugin.registration.extra.get("tool_guidance")
        if not isinstance(raw, dict):
            continue
        for key in ("preferred", "avoided", "order"):
            names = raw.get(key, [])
            target: list[str] = getattr(g, key)
            for name in names if isinstance(names, list) else []:
                if isinstance(name, str) and name in available and name not in target:
                    target.append(name)
                elif isinstance(name, str) and name not in available:  # said, not dropped
                    session.trace.note("tool_guidance", "unknown tool", name, pid)
    rank = {name: (0 if name in g.preferred else 2 if name in g.avoided else 1)
            for name in available}
    g.tools = sorted(available, key=lambda n: rank[n])
    return g
