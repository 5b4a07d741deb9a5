"""MessagePack in and out of the sandbox, with the limits of ABI v1.

msgpack-python does the work; this module adds what the ABI demands on top:
a nesting-depth limit, string-only map keys, no extension types, and named
errors. Decoding never trusts a declared length: the unpacker refuses lengths
larger than the buffer it was given.
"""

from __future__ import annotations

import gc
from itertools import chain, compress
from typing import Any

import msgpack

from wasmext.errors import DecodeError, EncodeError

__all__ = ["DecodeError", "check_depth", "decode", "encode", "may_nest_deeper"]


# Every byte except fixmap/fixarray (0x80-0x9f), array/map 16/32 (0xdc-0xdf)
# and bin 8/16/32 (0xc4-0xc6).
_BORING = bytes(b for b in range(256)
                if not (0x80 <= b <= 0x9F or 0xDC <= b <= 0xDF or 0xC4 <= b <= 0xC6))


def _refuse_ext(code: int, data: bytes) -> Any:
    raise DecodeError(f"extension type {code} is not allowed")


def encode(value: Any) -> bytes:
    """Encode a host value; raises EncodeError for what MessagePack cannot carry."""
    try:
        return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot encode as MessagePack: {exc}") from exc


_NESTS = (dict, list, tuple)  # what MessagePack encodes as a map or an array

# Above this size the byte scan costs more than walking the
# decoded value, whose cost follows the number of containers and items, not bytes.
SCAN_LIMIT = 4096


def _nests(kinds: set[type]) -> bool:
    return any(issubclass(k, _NESTS) for k in kinds)


def check_depth(value: Any, max_depth: int) -> None:
    """Raise DecodeError if containers nest deeper than max_depth or a map key is not a str.

    One pass, level by level, over the containers only: the types of a
    container's items are collected in C (`set(map(type, ...))`), so a long
    string or a list of scalars costs no Python loop; a wide level (`_wide_level`)
    is gathered without a Python loop over its containers either.
    """
    level = [value] if isinstance(value, _NESTS) else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            raise DecodeError(f"nesting deeper than {max_depth}")
        if len(level) > _WIDE:
            level = _wide_level(level)
            continue
        below: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                if item and set(map(type, item)) != {str}:
                    bad = next((k for k in item if not isinstance(k, str)), None)
                    if bad is not None:
                        raise DecodeError(f"map key {bad!r} is not a string")
                items: Any = item.values()
            else:
                items = item
            if _nests(set(map(type, items))):
                below.extend(v for v in items if isinstance(v, _NESTS))
        level = below


# A level of more containers than this is walked by `_wide_level`: its fixed cost of
# a few microseconds pays off, where the loop costs a microsecond a container.
_WIDE = 64


def _wide_level(level: list[Any]) -> list[Any]:
    """The containers one level below `level` (DecodeError for a map key that is not a
    str), gathered in C: keys, values and the nested ones by `chain`, `compress` and
    `map` over their types. A loop per container held the host for 0.8 s after a
    guest answered 1 MiB of a million empty lists (the answer's cap, whatever its
    deadline)."""
    kinds = list(map(type, level))
    found = set(kinds)
    maps = frozenset(k for k in found if issubclass(k, dict))
    # An empty map has neither keys nor values: a million of them cost nothing more.
    dicts = list(filter(None, compress(level, map(maps.__contains__, kinds)))) \
        if maps else []
    seqs = compress(level, map(frozenset(found - maps).__contains__, kinds)) \
        if maps else level
    if dicts and set(map(type, chain.from_iterable(dicts))) - {str}:
        bad = next(k for k in chain.from_iterable(dicts) if not isinstance(k, str))
        raise DecodeError(f"map key {bad!r} is not a string")
    items = list(chain(chain.from_iterable(seqs), chain.from_iterable(map(dict.values, dicts))))
    item_kinds = list(map(type, items))
    nested = frozenset(k for k in set(item_kinds) if issubclass(k, _NESTS))
    return list(compress(items, map(nested.__contains__, item_kinds))) if nested else []


def may_nest_deeper(data: bytes, max_depth: int) -> bool:
    """Cheap test: could this encoded document nest deeper than max_depth? (It over-
    approximates: container headers and bin headers, wherever they stand, count;
    a document over SCAN_LIMIT bytes always answers True: walk its value instead.)"""
    return len(data) > SCAN_LIMIT or (len(data) > max_depth and
                                      len(data.translate(None, _BORING)) > max_depth)


def _unpacked(data: bytes) -> Any:
    """`data` unpacked; a large document with the cyclic collector paused. Its
    containers are allocated a million at a time (1 MiB of empty lists): each
    allocation count past the collector's threshold starts a collection, the full ones
    walking the whole heap, so a guest's answer cost the host 0.3 s in a small process
    and seconds in a large one, where unpacking alone takes 0.04 s. Paused only while
    the unpacker runs (reference counting still frees what it drops), and left paused
    if the application paused it."""
    if len(data) <= SCAN_LIMIT or not gc.isenabled():
        return msgpack.unpackb(data, ext_hook=_refuse_ext)
    gc.disable()
    try:
        return msgpack.unpackb(data, ext_hook=_refuse_ext)
    finally:
        gc.enable()


def decode(data: bytes, max_depth: int = 64) -> Any:
    """Decode one complete document; raises DecodeError with the reason."""
    if not data:
        raise DecodeError("empty document")
    try:
        value = _unpacked(data)
    except DecodeError:
        raise
    except msgpack.ExtraData as exc:
        raise DecodeError("trailing bytes after the document") from exc
    except UnicodeDecodeError as exc:
        raise DecodeError("string is not valid UTF-8") from exc
    except msgpack.StackError as exc:
        raise DecodeError("nesting deeper than the decoder allows") from exc
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise DecodeError(f"malformed MessagePack: {exc or type(exc).__name__}") from exc
    # The unpacker already refuses keys that are neither str nor bytes. The walk
    # (for depth and bytes keys) is needed only if the document holds more
    # container headers than the depth limit, or any bin header: counting
    # bytes that could be either over-approximates both, at C speed. A large
    # document is walked at once: one pass, not a scan of its bytes and a walk.
    if len(data) > SCAN_LIMIT:
        check_depth(value, max_depth)
        return value
    if len(data) <= max_depth:
        # Every container takes a byte: too short to nest too deep. Only a bytes key
        # is left to refuse, and it needs a bin header byte (a string or number may
        # hold one too: then the walk runs for nothing). No table of marks to build.
        if 0xC4 in data or 0xC5 in data or 0xC6 in data:
            check_depth(value, max_depth)
        return value
    marks = data.translate(None, _BORING)
    # Integers, not one-byte strings: `int in bytes` is a memchr, `bytes in bytes` a
    # buffer export and a substring search: the three cost more than the unpacking.
    if len(marks) > max_depth or (0xC4 in marks or 0xC5 in marks or 0xC6 in marks):
        check_depth(value, max_depth)
    return value
