"""Plugins' resources and prompts, as `wasmext mcp serve` offers them.

A plugin lists them in its registration map and serves them through hooks:

    "resources": [{"uri": "notes://today", "name": "today", "description"?, "mime_type"?}]
    "resource_templates": [{"uri_template": "notes://day/{date}", "name", ...}]
        read as its `on_resource` hook, {"uri"} -> a string (text) or [resource block]
    "prompts": [{"name": "summarize", "description"?,
                 "arguments"?: [{"name", "description"?, "required"?}]}]
        got as its `on_prompt` hook, {"name", "args"} -> a string (one user message)
        or {"description"?, "messages": [{"role": "user" | "assistant", "content": block}]}

Prompts are served as `<plugin>__<name>`; a URI belongs to the first plugin that
lists it. Every entry is checked and cleaned (the plugin is hostile); a bad one is
skipped with a warning naming the plugin.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from wasmext.mcp.content import to_mcp, to_mcp_resource
from wasmext.text import DESCRIPTION_CAP, clean, clean_lines

__all__ = ["Catalog", "catalog", "match_template", "owners_of"]

log = logging.getLogger("wasmext.mcp")
MAX_ENTRIES = 256
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class Catalog:
    """What the plugins serve over MCP: resources, templates and prompts, by owner."""

    resources: dict[str, tuple[str, types.Resource]]  # uri -> (plugin, resource)
    templates: list[tuple[str, types.ResourceTemplate]]
    prompts: dict[str, tuple[str, str, types.Prompt]]  # served name -> (plugin, short, prompt)
    # A URI listed by more than one plugin -> those plugins (served by none of them).
    contested: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _entries(pid: str, raw: Any, what: str) -> Iterable[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        log.warning("plugin %s: '%s' must be an array; ignored", pid, what)
        return []
    good = [e for e in raw[:MAX_ENTRIES] if isinstance(e, dict)]
    if len(good) != len(raw):
        log.warning("plugin %s: '%s': only the first %d maps are used", pid, what, MAX_ENTRIES)
    return good


def _text(entry: dict[str, Any], key: str, limit: int) -> str | None:
    value = entry.get(key)
    return clean(value, limit) if isinstance(value, str) and value else None


def catalog(plugins: Mapping[str, Any]) -> Catalog:
    """What the loaded plugins (id -> LoadedPlugin) offer, checked and cleaned."""
    resources: dict[str, tuple[str, types.Resource]] = {}
    templates: list[tuple[str, types.ResourceTemplate]] = []
    prompts: dict[str, tuple[str, str, types.Prompt]] = {}
    contested: dict[str, tuple[str, ...]] = {}
    for pid, lp in sorted(dict(plugins).items()):
        extra = lp.plugin.registration.extra
        for entry in _entries(pid, extra.get("resources"), "resources"):
            uri, name = _text(entry, "uri", 2048), _text(entry, "name", 128)
            if uri is not None and name is not None and uri in resources \
                    and resources[uri][0] != pid:
                # Which plugin would serve it must not depend on how the ids sort.
                claims = contested.setdefault(uri, (resources[uri][0],))
                if pid not in claims:
                    contested[uri] = (*claims, pid)
                log.warning("plugins %s: each lists the resource %s; it is served by none",
                            ", ".join(contested[uri]), clean(uri, 200))
                continue
            if uri is None or name is None or uri in resources:
                log.warning("plugin %s: a resource needs a new 'uri' and a 'name'", pid)
                continue
            resources[uri] = (pid, types.Resource(
                uri=uri, name=name, mime_type=_text(entry, "mime_type", 128),
                description=clean_lines(entry.get("description") or "", DESCRIPTION_CAP)
                or None))
        for entry in _entries(pid, extra.get("resource_templates"), "resource_templates"):
            template, name = _text(entry, "uri_template", 2048), _text(entry, "name", 128)
            if template is None or name is None:
                log.warning("plugin %s: a resource template needs 'uri_template' and 'name'",
                            pid)
                continue
            templates.append((pid, types.ResourceTemplate(
                uri_template=template, name=name, mime_type=_text(entry, "mime_type", 128),
                description=clean_lines(entry.get("description") or "", DESCRIPTION_CAP)
                or None)))
        for entry in _entries(pid, extra.get("prompts"), "prompts"):
            short = entry.get("name")
            if not isinstance(short, str) or not _NAME.match(short):
                log.warning("plugin %s: a prompt needs a 'name' (letters, digits, _.-)", pid)
                continue
            args = [types.PromptArgument(name=clean(a["name"], 64),
                                         description=_text(a, "description", 512),
                                         required=a.get("required") is True)
                    for a in _entries(pid, entry.get("arguments"), "arguments")
                    if isinstance(a.get("name"), str) and a["name"]]
            served = f"{pid}__{short}"
            prompts[served] = (pid, short, types.Prompt(
                name=served, description=clean_lines(entry.get("description") or "",
                                                     DESCRIPTION_CAP) or None,
                arguments=args or None))
    for uri in contested:
        del resources[uri]
    return Catalog(resources, templates, prompts, contested)


_VARIABLE = re.compile(r"\{[^{}]*\}")
MAX_MATCHED_URI = 8192  # a longer URI fits no template


@functools.lru_cache(maxsize=4096)  # templates are plugin text: the kept ones are bounded
def _automaton(template: str) -> tuple[dict[str, int], int, int, int]:
    """The template as bit masks over its steps: per literal character the steps
    expecting it, the steps taking one character of a variable, the steps where a
    variable takes more, and the accepting bit."""
    literal: dict[str, int] = {}
    one = more = 0
    step, at = 0, 0
    for var in [*_VARIABLE.finditer(template), None]:
        for ch in template[at:var.start() if var is not None else len(template)]:
            literal[ch] = literal.get(ch, 0) | 1 << step
            step += 1
        if var is None:
            break
        one |= 1 << step
        more |= 1 << (step + 1)
        step, at = step + 2, var.end()
    return literal, one, more, 1 << step


def match_template(template: str, uri: str) -> bool:
    """Does `uri` fit the RFC 6570 level-1 `template` (each {var}: one or more characters
    other than "/")?

    In time linear in the URI: the template is plugin text, and as a backtracking regex
    ("{a}{b}{c}{d}{e}{f}{g}{h}!" is [^/]+ eight times) one resources/read took seconds
    to minutes on the server's event loop. Here every step of the template is followed
    at once, as bits of one integer."""
    if len(uri) > MAX_MATCHED_URI:
        return False
    literal, one, more, accept = _automaton(template)
    states = 1 | (1 & more) << 1
    for ch in uri:
        taken = states & literal.get(ch, 0)
        if ch != "/":
            taken |= states & one
            stay = states & more
        else:
            stay = 0
        states = taken << 1 | stay
        states |= (states & more) << 1  # a variable's extra characters may be none
        if not states:
            return False
    return bool(states & accept)


def owners_of(cat: Catalog, uri: str) -> list[str]:
    """Every plugin that claims the URI, by listing it or by a template that fits it.

    More than one is a conflict the caller refuses: served by the first, a plugin
    could take another's resources (and read what clients ask it) by listing the same
    URI, a template over the other's, or one URI of the other's template, its id
    sorting first."""
    owners = list(cat.contested.get(uri, ()))
    if not owners and uri in cat.resources:
        owners.append(cat.resources[uri][0])
    for pid, template in cat.templates:
        if pid not in owners and match_template(template.uri_template, uri):
            owners.append(pid)
    return owners


def resource_contents(pid: str, uri: str, value: Any
                      ) -> list[types.TextResourceContents | types.BlobResourceContents]:
    """A plugin's `on_resource` answer as MCP contents (ValueError naming the plugin)."""
    if isinstance(value, str):
        return [types.TextResourceContents(uri=uri, text=value)]
    if not isinstance(value, list) or not value or len(value) > MAX_ENTRIES:
        raise ValueError(f"plugin {pid}: on_resource answers a string or a list of "
                         "resource blocks")
    out = []
    for i, block in enumerate(value):
        if not isinstance(block, dict) or block.get("type") != "resource":
            raise ValueError(f"plugin {pid}: content[{i}] must be a resource block")
        out.append(to_mcp_resource({k: v for k, v in block.items() if k != "type"},
                                   f"plugin {pid}: content[{i}]"))
    return out


def prompt_result(pid: str, value: Any) -> types.GetPromptResult:
    """A plugin's `on_prompt` answer as an MCP GetPromptResult (ValueError naming it)."""
    if isinstance(value, str):
        return types.GetPromptResult(messages=[types.PromptMessage(
            role="user", content=types.TextContent(text=value))])
    if not isinstance(value, dict) or not isinstance(value.get("messages"), list):
        raise ValueError(f"plugin {pid}: on_prompt answers a string or {{messages: [...]}}")
    messages = []
    for i, message in enumerate(value["messages"][:MAX_ENTRIES]):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise ValueError(f"plugin {pid}: messages[{i}].role is user or assistant")
        content = to_mcp([message.get("content")], f"plugin {pid}: messages[{i}]")[0]
        messages.append(types.PromptMessage(role=role, content=content))
    description = value.get("description")
    return types.GetPromptResult(
        description=clean(description, 512) if isinstance(description, str) else None,
        messages=messages)
