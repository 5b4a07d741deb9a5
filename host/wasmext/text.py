"""Plugin-controlled text made safe for an operator: one bounded, inert line.

Everything a plugin writes that reaches a terminal, a log, a trace, an
exception or an MCP client goes through `clean` (or `clean_lines` for a
multi-line description) first:

* C0 controls, DEL, C1 controls, Unicode format characters (category Cf: the
  bidi embeddings/overrides/isolates U+202A-U+202E and U+2066-U+2069, the marks
  U+200E/U+200F/U+061C, zero-width characters, ...), line and paragraph
  separators and lone surrogates become visible escapes (`\\n`, `\\r`, `\\t`,
  `\\x1b`, `\\u202e`). One message therefore stays one line and cannot drive a
  terminal (OSC 8 hyperlinks, cursor moves, BEL) or reorder what is shown.
* The result is at most `limit` characters (`CAP` = 1024 by default, a
  description `DESCRIPTION_CAP` = 4096); a longer text is cut and ends with the
  marker `…[+N chars]`, N being how many characters of the original were not
  shown.

* Credentials in a URL (`scheme://user:password@host`) become `scheme://***@host`
  (`redact_url`): a configured model, NATS or MCP URL never shows its password.

`clean` is idempotent and never raises on a `str`. This module imports nothing
of wasmext (a layer-0 leaf).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from itertools import repeat
from typing import Any

__all__ = ["CAP", "DESCRIPTION_CAP", "bounded_tree", "clean", "clean_lines", "clean_tree",
           "has_unsafe", "is_unsafe", "json_safe", "redact_url", "without_credentials"]

CAP = 1024
DESCRIPTION_CAP = 4096
_MIN_LIMIT = 32
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_PLAIN = re.compile(r"[\x20-\x7e]*")
# The userinfo of a URL: up to the last "@" before the path, query, fragment or a space.
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,31}://)[^/\s?#]*@")


def without_credentials(url: str) -> tuple[str, str | None]:
    """`url` without its `user:password@`, and those as a Basic Authorization value: a
    client library that logs the URLs it requests never holds the password."""
    import base64
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return urlunsplit(parts._replace(netloc=hostport)), f"Basic {token}"


def redact_url(text: str) -> str:
    """`text` with the credentials of every URL in it (`user:password@`) shown as `***@`."""
    if "@" not in text or "://" not in text:
        return text
    return _USERINFO.sub(r"\1***@", text)


def is_unsafe(ch: str) -> bool:
    """A control, format or separator character, or a lone surrogate."""
    o = ord(ch)
    if 0x20 <= o < 0x7F:
        return False
    if o < 0xA0:
        return True
    return unicodedata.category(ch) in _UNSAFE_CATEGORIES


def has_unsafe(text: str) -> bool:
    """Does `text` hold a character `is_unsafe` names? (ASCII text is tested at C speed.)"""
    if text.isascii():
        return not text.isprintable()
    return any(map(is_unsafe, text))


def _escape(ch: str) -> str:
    named = _NAMED.get(ch)
    if named is not None:
        return named
    o = ord(ch)
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"


def _marker(hidden: int) -> str:
    return f"…[+{hidden} chars]"


def _clean(text: str, limit: int, keep_newlines: bool) -> str:
    if limit < _MIN_LIMIT:
        raise ValueError(f"limit must be at least {_MIN_LIMIT}")
    text = redact_url(text)
    if len(text) <= limit and _PLAIN.fullmatch(text):
        return text  # the common case: short printable ASCII
    pieces: list[str] = []
    used = 0
    for ch in text:
        unsafe = is_unsafe(ch) and not (keep_newlines and ch == "\n")
        piece = _escape(ch) if unsafe else ch
        if used + len(piece) > limit:
            break
        pieces.append(piece)
        used += len(piece)
    else:
        return "".join(pieces)
    # Cut: make room for the marker (each piece stands for one original character).
    while pieces and used + len(_marker(len(text) - len(pieces))) > limit:
        used -= len(pieces.pop())
    return "".join(pieces) + _marker(len(text) - len(pieces))


def clean(text: Any, limit: int = CAP) -> str:
    """`text` as one inert line of at most `limit` characters (see the module doc)."""
    return _clean(text if isinstance(text, str) else str(text), limit, False)


def clean_lines(text: Any, limit: int = DESCRIPTION_CAP) -> str:
    """Like `clean`, but newlines stay (a description may have paragraphs); a CR
    before a newline is dropped, any other CR is escaped."""
    raw = text if isinstance(text, str) else str(text)
    return _clean(raw.replace("\r\n", "\n"), limit, True)


def clean_tree(value: Any, limit: int = CAP, depth: int = 0) -> Any:
    """Every string (keys included) in a JSON-like value cleaned; bytes, numbers,
    bools and None as they are. Past 64 levels a value becomes its cleaned repr."""
    if isinstance(value, str):
        return clean(value, limit)
    if depth > 64:
        return clean(repr(value), limit)
    if isinstance(value, dict):
        return {clean(k, limit): clean_tree(v, limit, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_tree(v, limit, depth + 1) for v in value]
    return value


class _Budget:
    """What is left of a document's characters, and what did not fit."""

    __slots__ = ("left", "limit", "omitted")

    def __init__(self, chars: int, limit: int) -> None:
        self.left, self.limit, self.omitted = chars, limit, 0

    def scalar(self, value: Any) -> tuple[Any, int]:
        if isinstance(value, str):
            value = clean(value, self.limit)
        elif value is not None and not isinstance(value, (bool, int, float)):
            value = clean(repr(value), self.limit)  # bytes, an extension type: shown, inert
        return value, len(json_safe(json.dumps(value, ensure_ascii=False)))

    def take(self, value: Any, depth: int) -> tuple[Any, int]:
        """`value` cleaned and cut to what is left; (it, the characters it costs).

        A container charges what it keeps as it goes; a scalar is only measured."""
        if not isinstance(value, (dict, list, tuple)):
            return self.scalar(value)
        if depth > 64:
            return self.scalar(repr(value))
        # Keys are cleaned as they are reached: past the budget none is (a hostile map
        # may hold 300,000 of them).
        is_map = isinstance(value, dict)
        items: Iterable[tuple[Any, Any]] = value.items() if isinstance(value, dict) \
            else zip(repeat(None), value)
        # With indent=2: a newline and indent before each item, a comma after it, and
        # a newline, indent and bracket to close; each counted at its widest.
        cost = 3 + 2 * depth
        self.left -= cost
        kept: list[tuple[str | None, Any]] = []
        for i, (raw_key, item) in enumerate(items):
            key = clean(raw_key, self.limit) if is_map else None
            overhead = 2 + 2 * (depth + 1)
            if key is not None:
                overhead += len(json_safe(json.dumps(key, ensure_ascii=False))) + 2
            nested = isinstance(item, (dict, list, tuple)) and depth + 1 <= 64
            if nested:
                fits = self.left >= overhead + 3 + 2 * (depth + 1)
                used = 0
            else:
                taken, used = self.take(item, depth + 1)
                fits = self.left >= overhead + used
            if not fits:
                self.omitted += len(value) - i
                break
            self.left -= overhead + used
            if nested:
                taken, used = self.take(item, depth + 1)
            kept.append((key, taken))
            cost += overhead + used
        if is_map:
            return dict(kept), cost
        return [v for _, v in kept], cost


def bounded_tree(value: Any, chars: int, limit: int = CAP) -> tuple[Any, int]:
    """`value` cleaned as `clean_tree` does, then cut to fit `chars` characters of JSON
    (`json.dumps(..., indent=2)`, `json_safe`); (the tree, how many list items and map
    entries were left out). Entries are kept in order until the next would not fit."""
    budget = _Budget(chars, limit)
    tree, cost = budget.take(value, 0)
    if cost > chars:  # a lone scalar too long, or a container with no room to open
        return None, 1
    return tree, budget.omitted


def _json_escape(match: re.Match[str]) -> str:
    ch = match.group()
    if not is_unsafe(ch):
        return ch
    o = ord(ch)
    if o <= 0xFFFF:
        return f"\\u{o:04x}"
    o -= 0x10000
    return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"


_NON_ASCII = re.compile(r"[^\x00-\x7e]")


def json_safe(document: str) -> str:
    """A JSON text (from `json.dumps(..., ensure_ascii=False)`) with every unsafe
    character escaped as `\\uXXXX`: the same document, inert on a terminal.
    (json.dumps already escapes C0; DEL, C1, Cf and lone surrogates it leaves.)"""
    if document.isascii() and "\x7f" not in document:
        return document
    return _NON_ASCII.sub(_json_escape, document)
