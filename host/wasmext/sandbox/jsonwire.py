"""The component world's JSON transport: call requests and answers as JSON text for
a guest that asked for it (abi/SPEC.md section 8, "JSON payloads").

A JavaScript guest decodes and encodes MessagePack in interpreted code, several
times slower than its engine's native `JSON.parse` and `JSON.stringify`. A guest
whose registration map lists `"json"` in `codecs` gets a call's request as JSON
whenever that request means exactly the same in JSON (`json_request`), else the
usual MessagePack document; it answers in either, marked by the first byte (a
JSON answer starts with `{`, which as MessagePack is the int 123, never an
answer). The answer is hostile input like any other: `decode_json` holds it to
the same depth bound before it is parsed, refuses what MessagePack could not
have carried (NaN, infinities, lone surrogates) and reads numbers as the guest's
engine held them.
"""

from __future__ import annotations

import json
import json.scanner
import math
from collections.abc import Callable
from itertools import accumulate
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from wasmext.errors import DecodeError

__all__ = ["JSON_MARK", "SAFE_INT", "decode_json", "json_request"]

JSON_MARK = 0x7B  # '{': every JSON request and answer starts with it
SAFE_INT = 2**53  # JavaScript's numbers hold every integer up to here exactly

# What a request may hold to be sent as JSON: anything else (bytes, other key types,
# subclasses whose JSON form is not their MessagePack one) goes as MessagePack.
_SCALARS = frozenset({str, bool, type(None)})
_PLAIN = _SCALARS | {int, float, dict, list, tuple}
_NESTS = (dict, list, tuple)
_STR = frozenset({str})


def _encoder() -> Callable[[Any], str]:
    """Compact JSON text of a value `_representable` passed. The json module's C
    encoder made once: `JSONEncoder.encode` builds it again on every call, which
    costs twice what encoding a hook's request does."""
    if c_make_encoder is None:  # an interpreter without the C accelerator
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False,
                                check_circular=False).encode
    chunks = c_make_encoder(None, None, encode_basestring, None, ":", ",", False, False, False)
    return lambda value: "".join(chunks(value, 0))


_dumps = _encoder()


def _representable(value: dict[str, Any], max_depth: int) -> bool:
    """True when `value` means the same as JSON: str keys, no bytes, ints within
    +-2^53, finite floats, at most `max_depth` nested containers. One pass, level by
    level over the containers; the types of a container's items are collected in C."""
    level: list[Any] = [value]
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return False
        below: list[Any] = []
        for item in level:
            if type(item) is dict:
                if item and set(map(type, item)) != _STR:
                    return False
                items: Any = item.values()
            else:
                items = item
            kinds = set(map(type, items))
            if kinds <= _SCALARS:
                continue
            if not kinds <= _PLAIN:
                return False
            if int in kinds and any(not -SAFE_INT <= v <= SAFE_INT
                                    for v in items if type(v) is int):
                return False
            if float in kinds and not all(math.isfinite(v) for v in items if type(v) is float):
                return False
            below.extend(v for v in items if type(v) in _NESTS)
        level = below
    return True


def json_request(req: dict[str, Any], max_depth: int, max_bytes: int) -> bytes | None:
    """The request as compact UTF-8 JSON, or None when JSON would not carry it
    exactly (then it goes as MessagePack) or would be over `max_bytes`."""
    if not _representable(req, max_depth):
        return None
    try:
        out = _dumps(req).encode()
    except (ValueError, TypeError, RecursionError):  # a lone surrogate, say
        return None
    return out if len(out) <= max_bytes else None


# -- answers -------------------------------------------------------------------------

_OPENERS = bytes(b for b in range(256) if b not in b"[{")
_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def _depth_outside_strings(data: bytes) -> int:
    """The deepest bracket nesting of a JSON text, brackets inside strings ignored.

    Linear and at C speed: escaped backslashes and quotes are dropped, so the
    quotes left delimit the strings; the text between every other quote is outside
    them. (On a malformed text the figure may be off, but only past the point where
    the parser stops reading.)"""
    bare = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = b"".join(bare.split(b'"')[0::2]).translate(None, _BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, outside)), default=0)


def _refuse_constant(name: str) -> Any:
    raise DecodeError(f"{name} is not a JSON number the ABI carries")


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise DecodeError(f"number {text[:32]}... is out of range")
    return value


def _integer(text: str) -> int | float:
    """An integer literal as the guest's engine held it: an int within +-2^53, beyond
    that the float64 it was (which MessagePack would have carried as a float)."""
    if len(text) <= 17:
        value = int(text)
        if -SAFE_INT <= value <= SAFE_INT:
            return value
    return _number(text)


# The decoder's scanner, called directly: `JSONDecoder.decode` adds two Python frames
# and a regex for what `_loads` checks itself (no bytes but whitespace after the value).
_scan = json.scanner.make_scanner(json.JSONDecoder(  # type: ignore[arg-type]
    parse_float=_number, parse_int=_integer, parse_constant=_refuse_constant))


def _loads(text: str) -> Any:
    try:
        value, end = _scan(text, 0)
    except StopIteration as exc:
        raise DecodeError(f"malformed JSON: no value at character {exc.value}") from None
    if end != len(text) and text[end:].strip(" \t\n\r"):
        raise DecodeError(f"malformed JSON: Extra data at character {end}")
    return value


def _check_strings(value: Any) -> None:
    """Refuse a lone surrogate (`\\ud800` escaped: valid JSON, not Unicode) in any
    string or key; walked only when the text holds an escape."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError:
                raise DecodeError("a string holds a lone surrogate") from None
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def decode_json(data: bytes, max_depth: int = 64) -> Any:
    """Decode a guest's JSON answer under the ABI's limits; raises DecodeError."""
    if data[:1] != b"{":
        raise DecodeError("a JSON answer starts with '{'")
    # More openers than the limit: measure the nesting before the (recursive) parser
    # sees the text, so its recursion is never deeper than the limit.
    if len(data.translate(None, _OPENERS)) > max_depth and \
            _depth_outside_strings(data) > max_depth:
        raise DecodeError(f"nesting deeper than {max_depth}")
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise DecodeError("the answer is not UTF-8") from exc
    try:
        value = _loads(text)
    except DecodeError:
        raise
    except json.JSONDecodeError as exc:
        raise DecodeError(f"malformed JSON: {exc.msg} at character {exc.pos}") from exc
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"malformed JSON: {type(exc).__name__}") from exc
    if "\\u" in text:
        _check_strings(value)
    return value
