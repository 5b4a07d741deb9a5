"""Helpers for output extensions, as reference 003's helpers library offers them.

Pure Python, no host call: `extract_json_from_text` (the first JSON object or
array in a model's answer, fenced or not), `safe_json_dumps`, `count_words`,
`extract_sentences`, `extract_code_blocks`, `truncate`, and the result
builders `json_result` / `text_result` (a value the host unwraps into the
result's content, content type and metadata) and `error_result` (raise it: the
host marks that result failed).
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["RESULT_KEY", "count_words", "error_result", "extract_code_blocks",
           "extract_json_from_text", "extract_sentences", "json_result", "safe_json_dumps",
           "text_result", "truncate"]

RESULT_KEY = "extension_result"  # the one key of a result built here (docs/hooks.md)
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[ \t]*\n(.*?)```", re.DOTALL)
MAX_SCAN = 1 << 20  # a model's answer longer than this is searched in its first MiB only


def extract_json_from_text(text: str) -> Any:
    """The first JSON object or array in `text` (fenced code first), or None."""
    text = text[:MAX_SCAN]
    for m in _FENCE.finditer(text):
        found = _first_json(m.group(2))
        if found is not None:
            return found
    return _first_json(text)


def _first_json(text: str) -> Any:
    decoder = json.JSONDecoder()
    tries = 0
    for i, c in enumerate(text):
        if c in "{[":
            tries += 1
            if tries > 256:  # hostile text full of brackets: give up, linear time
                return None
            try:
                value, _ = decoder.raw_decode(text, i)
            except (ValueError, RecursionError):
                continue
            return value
    return None


def safe_json_dumps(value: Any, indent: int | None = 2) -> str:
    """`json.dumps` that never fails on a value JSON has no type for (it prints str())."""
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str)


def count_words(text: str) -> int:
    """The number of whitespace-separated words."""
    return len(text.split())


def extract_sentences(text: str) -> list[str]:
    """The sentences of `text`, split after '.', '!' and '?'."""
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


def extract_code_blocks(text: str) -> list[dict[str, str]]:
    """Markdown fenced code blocks: [{"language", "code"}]."""
    return [{"language": m.group(1), "code": m.group(2)} for m in _FENCE.finditer(text)]


def truncate(text: str, max_chars: int = 1000) -> str:
    """`text` cut at a word boundary to at most `max_chars` characters, with an ellipsis."""
    if len(text) <= max_chars:
        return text
    cut = text[:max(0, max_chars - 1)]
    space = cut.rfind(" ")
    return (cut[:space] if space > 0 else cut).rstrip() + "…"


def json_result(content: Any, **metadata: Any) -> dict[str, Any]:
    """A result with content type application/json and `metadata`."""
    return {RESULT_KEY: {"content": content, "content_type": "application/json",
                         "metadata": metadata}}


def text_result(content: str, **metadata: Any) -> dict[str, Any]:
    """A result with content type text/plain and `metadata`."""
    return {RESULT_KEY: {"content": content, "content_type": "text/plain",
                         "metadata": metadata}}


def error_result(message: str) -> Exception:
    """`raise error_result("...")`: the host marks this extension's result failed."""
    from wasmext_guest.plugin import Fail  # the plugin layer imports the component bindings

    return Fail("invalid", message)
