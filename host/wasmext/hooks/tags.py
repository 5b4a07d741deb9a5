"""on_tag: XML-style tags in text, handled innermost first.

`<name attr="v">content</name>` with a registered handler becomes the
handler's value; several handlers of one tag chain like transforms. Patterns
are exact (`think`) or a prefix ending in `*` (`tool_*`). Tags without a
handler, unclosed tags, stray closing tags and self-closing tags stay as text.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wasmext.hooks.context import HookSession
    from wasmext.hooks.ordering import Entry

__all__ = ["Element", "matches", "parse", "run_tags"]

MAX_DEPTH = 64
_NAME = r"[A-Za-z_][\w.\-:]*"
_TOKEN = re.compile(
    rf"<(?P<open>{_NAME})(?P<attrs>(?:\s+{_NAME}(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'))?)*)\s*>"
    rf"|</(?P<close>{_NAME})\s*>")
_ATTR = re.compile(rf"({_NAME})(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'))?")


@dataclass
class Element:
    """A parsed tag: its name, opening text, attributes and children."""

    name: str
    open_text: str
    attrs: dict[str, str]
    parts: list[str | Element] = field(default_factory=list)


def _attrs(text: str) -> dict[str, str]:
    return {m.group(1): html.unescape(m.group(2) if m.group(2) is not None else
                                      (m.group(3) or "")) for m in _ATTR.finditer(text)}


def parse(text: str) -> list[str | Element]:
    """Text and closed elements; anything unbalanced stays text."""
    root: list[str | Element] = []
    stack: list[Element] = []

    def sink() -> list[str | Element]:
        return stack[-1].parts if stack else root

    pos = 0
    for m in _TOKEN.finditer(text):
        sink().append(text[pos:m.start()])
        pos = m.end()
        if m.group("open") is not None and len(stack) < MAX_DEPTH:
            stack.append(Element(m.group("open"), m.group(0), _attrs(m.group("attrs"))))
        elif m.group("close") is not None and any(e.name == m.group("close") for e in stack):
            while stack[-1].name != m.group("close"):
                _unwrap(stack, root)  # an unclosed inner tag becomes text
            element = stack.pop()
            sink().append(element)
        else:
            sink().append(m.group(0))
    sink().append(text[pos:])
    while stack:
        _unwrap(stack, root)
    return root


def _unwrap(stack: list[Element], root: list[str | Element]) -> None:
    """Turn the innermost open element back into its opening text and parts."""
    element = stack.pop()
    (stack[-1].parts if stack else root).extend([element.open_text, *element.parts])


def matches(pattern: str | None, name: str) -> bool:
    """Whether a tag name matches a pattern (exact, or a prefix ending in '*')."""
    if not pattern:
        return False
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


def _render(parts: list[str | Element], session: HookSession, entries: list[Entry]) -> str:
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        content = _render(part.parts, session, entries)
        handlers = [e for e in entries if matches(e.pattern, part.name)]
        replacement: str | None = None
        for entry in handlers:
            answer = session.host.call(entry, {"tag": part.name, "attrs": part.attrs,
                                               "content": content}, session)
            if answer is None or not answer.changed:
                continue
            if not isinstance(answer.value, str):
                session.trace.note("on_tag", "failed", "value is not a string; tag kept",
                                   entry.plugin_id)
                continue
            replacement = content = answer.value
            if answer.stop:
                break
        if replacement is None:
            out.append(f"{part.open_text}{content}</{part.name}>")
        else:
            out.append(replacement)
    return "".join(out)


def run_tags(session: HookSession, text: str) -> str:
    """Render the text with each tag replaced by its on_tag plugins' answers."""
    entries = session.host.ordered("on_tag")
    if not entries or "<" not in text:
        return text
    return _render(parse(text), session, entries)
