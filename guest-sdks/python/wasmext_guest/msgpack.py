"""MessagePack for ABI v1 guests, in pure Python (the guest has no C extensions).

`pack` writes the smallest encoding of every value (abi/vectors/msgpack.json is
the contract: floats are float64, bytes are bin, tuples are arrays); `unpack`
reads any well-formed document up to `max_depth` levels and refuses anything
else with `MsgpackError`: truncation, trailing bytes, ext types, invalid UTF-8.

Inside a component this codec is most of a small call's guest time (CPython
runs interpreted by wasmtime, with fuel metering), so both directions are
written for the interpreter: the common types are tested first by exact type,
small lengths are one byte appended, and the reader indexes the buffer directly
and passes positions instead of slicing through helper methods.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["MAX_DEPTH", "MsgpackError", "pack", "pack_answer", "unpack", "unpack_call"]

MAX_DEPTH = 64


class MsgpackError(ValueError):
    """A document that is not ABI v1 MessagePack, or a value that has no encoding."""


_STR8, _STR16, _STR32 = 0xD9, 0xDA, 0xDB
_SIMPLE = {0xC0: None, 0xC2: False, 0xC3: True}
_float64 = struct.Struct(">d")
_float32 = struct.Struct(">f")


def _pack_int(n: int, out: bytearray) -> None:
    if 0 <= n <= 0x7F:
        out.append(n)
    elif -32 <= n < 0:
        out.append(n & 0xFF)
    elif n >= 0:
        if n <= 0xFF:
            out += b"\xcc" + n.to_bytes(1, "big")
        elif n <= 0xFFFF:
            out += b"\xcd" + n.to_bytes(2, "big")
        elif n <= 0xFFFFFFFF:
            out += b"\xce" + n.to_bytes(4, "big")
        elif n <= 0xFFFFFFFFFFFFFFFF:
            out += b"\xcf" + n.to_bytes(8, "big")
        else:
            raise MsgpackError(f"int {n} does not fit 64 bits")
    elif n >= -0x80:
        out += b"\xd0" + n.to_bytes(1, "big", signed=True)
    elif n >= -0x8000:
        out += b"\xd1" + n.to_bytes(2, "big", signed=True)
    elif n >= -0x80000000:
        out += b"\xd2" + n.to_bytes(4, "big", signed=True)
    elif n >= -0x8000000000000000:
        out += b"\xd3" + n.to_bytes(8, "big", signed=True)
    else:
        raise MsgpackError(f"int {n} does not fit 64 bits")


def _pack_len(n: int, fix: int, fix_max: int, b8: int | None, b16: int, b32: int,
              out: bytearray) -> None:
    if n <= fix_max:
        out.append(fix | n)
    elif b8 is not None and n <= 0xFF:
        out += bytes((b8, n))
    elif n <= 0xFFFF:
        out.append(b16)
        out += n.to_bytes(2, "big")
    elif n <= 0xFFFFFFFF:
        out.append(b32)
        out += n.to_bytes(4, "big")
    else:
        raise MsgpackError(f"length {n} does not fit 32 bits")


def _pack_str(v: str, out: bytearray) -> None:
    raw = v.encode("utf-8")
    n = len(raw)
    if n <= 31:
        out.append(0xA0 | n)
    elif n <= 0xFF:
        out.append(_STR8)
        out.append(n)
    else:
        _pack_len(n, 0xA0, 31, _STR8, _STR16, _STR32, out)
    out += raw


def _pack(v: Any, out: bytearray, depth: int) -> None:
    t = type(v)
    if t is str:
        _pack_str(v, out)
    elif t is dict:
        if depth > MAX_DEPTH:
            raise MsgpackError(f"containers nested deeper than {MAX_DEPTH}")
        n = len(v)
        if n <= 15:
            out.append(0x80 | n)
        else:
            _pack_len(n, 0x80, 15, None, 0xDE, 0xDF, out)
        depth += 1
        for key, item in v.items():  # str keys and values without a call of _pack
            if type(key) is str:
                _pack_str(key, out)
            else:
                _pack(key, out, depth)
            if type(item) is str:
                _pack_str(item, out)
            else:
                _pack(item, out, depth)
    elif t is bool:
        out.append(0xC3 if v else 0xC2)
    elif t is int:
        if 0 <= v <= 0x7F:
            out.append(v)
        else:
            _pack_int(v, out)
    elif v is None:
        out.append(0xC0)
    elif t is list or t is tuple:
        if depth > MAX_DEPTH:
            raise MsgpackError(f"containers nested deeper than {MAX_DEPTH}")
        n = len(v)
        if n <= 15:
            out.append(0x90 | n)
        else:
            _pack_len(n, 0x90, 15, None, 0xDC, 0xDD, out)
        depth += 1
        for item in v:
            _pack(item, out, depth)
    else:
        _pack_other(v, out, depth)


def _pack_other(v: Any, out: bytearray, depth: int) -> None:
    """Floats, bytes, and subclasses of the common types (an IntEnum, a str subclass)."""
    if depth > MAX_DEPTH and isinstance(v, (list, tuple, dict)):
        raise MsgpackError(f"containers nested deeper than {MAX_DEPTH}")
    if v is True:
        out.append(0xC3)
    elif v is False:
        out.append(0xC2)
    elif isinstance(v, int):
        _pack_int(v, out)
    elif isinstance(v, float):
        out.append(0xCB)
        out += _float64.pack(v)
    elif isinstance(v, str):
        raw = v.encode("utf-8")
        _pack_len(len(raw), 0xA0, 31, _STR8, _STR16, _STR32, out)
        out += raw
    elif isinstance(v, (bytes, bytearray, memoryview)):
        raw = bytes(v)
        n = len(raw)
        if n <= 0xFF:
            out += bytes((0xC4, n))
        else:
            _pack_len(n, 0, -1, None, 0xC5, 0xC6, out)
        out += raw
    elif isinstance(v, (list, tuple)):
        _pack_len(len(v), 0x90, 15, None, 0xDC, 0xDD, out)
        for item in v:
            _pack(item, out, depth + 1)
    elif isinstance(v, dict):
        _pack_len(len(v), 0x80, 15, None, 0xDE, 0xDF, out)
        for key, item in v.items():
            _pack(key, out, depth + 1)
            _pack(item, out, depth + 1)
    else:
        raise MsgpackError(f"cannot encode a {type(v).__name__}")


def pack(value: Any) -> bytes:
    """The canonical MessagePack bytes of `value`."""
    out = bytearray()
    _pack(value, out, 1)
    return bytes(out)


# {"ok": true, "value": ...}: the head of nearly every call answer, written once.
_ANSWER_HEAD = b"\x82\xa2ok\xc3\xa5value"


def pack_answer(value: Any) -> bytes:
    """The bytes of `pack({"ok": True, "value": value})`, without building that map."""
    out = bytearray(_ANSWER_HEAD)
    _pack(value, out, 2)  # the value sits inside the answer map: depth 2, as in pack()
    return bytes(out)


def _truncated() -> MsgpackError:
    return MsgpackError("truncated document")


def _text(buf: bytes, pos: int, n: int) -> tuple[str, int]:
    end = pos + n
    if end > len(buf):
        raise _truncated()
    try:
        return buf[pos:end].decode("utf-8"), end
    except UnicodeDecodeError as exc:
        raise MsgpackError("a str that is not UTF-8") from exc


def _uint(buf: bytes, pos: int, n: int) -> tuple[int, int]:
    end = pos + n
    if end > len(buf):
        raise _truncated()
    return int.from_bytes(buf[pos:end], "big"), end


def _array(buf: bytes, pos: int, n: int, depth: int, max_depth: int) -> tuple[list[Any], int]:
    if depth + 1 > max_depth:
        raise MsgpackError(f"containers nested deeper than {max_depth}")
    out = []
    depth += 1
    for _ in range(n):
        item, pos = _value(buf, pos, depth, max_depth)
        out.append(item)
    return out, pos


def _map(buf: bytes, pos: int, n: int, depth: int, max_depth: int
         ) -> tuple[dict[Any, Any], int]:
    if depth + 1 > max_depth:
        raise MsgpackError(f"containers nested deeper than {max_depth}")
    out: dict[Any, Any] = {}
    depth += 1
    size = len(buf)
    for _ in range(n):
        b = buf[pos] if pos < size else -1
        if 0xA0 <= b <= 0xBF:  # a short str, as nearly every key is: read here
            end = pos + 1 + (b & 0x1F)
            if end > size:
                raise _truncated()
            try:
                key = buf[pos + 1:end].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise MsgpackError("a str that is not UTF-8") from exc
            pos = end
        else:
            key, pos = _value(buf, pos, depth, max_depth)
        b = buf[pos] if pos < size else -1
        if 0xA0 <= b <= 0xBF or b == _STR8:  # a str value up to 255 bytes: read here too
            if b == _STR8:
                if pos + 1 >= size:
                    raise _truncated()
                start, end = pos + 2, pos + 2 + buf[pos + 1]
            else:
                start, end = pos + 1, pos + 1 + (b & 0x1F)
            if end > size:
                raise _truncated()
            try:
                item = buf[start:end].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise MsgpackError("a str that is not UTF-8") from exc
            pos = end
        else:
            item, pos = _value(buf, pos, depth, max_depth)
        try:
            out[key] = item
        except TypeError as exc:  # an array or map as a key: not hashable here
            raise MsgpackError("a map key that is an array or a map") from exc
    return out, pos


def _value(buf: bytes, pos: int, depth: int, max_depth: int) -> tuple[Any, int]:
    """The value at `pos` and the position after it; `depth`: containers around it."""
    try:
        b = buf[pos]
    except IndexError:
        raise _truncated() from None
    pos += 1
    if b <= 0x7F:
        return b, pos
    if b >= 0xE0:
        return b - 0x100, pos
    if b >= 0xA0:
        if b <= 0xBF:
            return _text(buf, pos, b & 0x1F)
    elif b >= 0x90:
        return _array(buf, pos, b & 0x0F, depth, max_depth)
    else:
        return _map(buf, pos, b & 0x0F, depth, max_depth)
    if b in _SIMPLE:
        return _SIMPLE[b], pos
    if 0xCC <= b <= 0xCF:
        return _uint(buf, pos, 1 << (b - 0xCC))
    if 0xD0 <= b <= 0xD3:
        end = pos + (1 << (b - 0xD0))
        if end > len(buf):
            raise _truncated()
        return int.from_bytes(buf[pos:end], "big", signed=True), end
    if b == 0xCA or b == 0xCB:
        codec = _float32 if b == 0xCA else _float64
        end = pos + codec.size
        if end > len(buf):
            raise _truncated()
        return float(codec.unpack_from(buf, pos)[0]), end
    if _STR8 <= b <= _STR32:
        n, pos = _uint(buf, pos, 1 << (b - _STR8))
        return _text(buf, pos, n)
    if 0xC4 <= b <= 0xC6:
        n, pos = _uint(buf, pos, 1 << (b - 0xC4))
        end = pos + n
        if end > len(buf):
            raise _truncated()
        return buf[pos:end], end
    if b == 0xDC or b == 0xDD:
        n, pos = _uint(buf, pos, 2 if b == 0xDC else 4)
        return _array(buf, pos, n, depth, max_depth)
    if b == 0xDE or b == 0xDF:
        n, pos = _uint(buf, pos, 2 if b == 0xDE else 4)
        return _map(buf, pos, n, depth, max_depth)
    raise MsgpackError(f"type byte {b:#04x} is not part of ABI v1")


def unpack(data: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The one value `data` holds; MsgpackError for anything else."""
    buf = bytes(data)
    try:
        value, pos = _value(buf, 0, 0, max_depth)
    except RecursionError as exc:  # a max_depth above what this interpreter's stack holds
        raise MsgpackError("containers nested too deep for this interpreter") from exc
    if pos != len(buf):
        raise MsgpackError(f"{len(buf) - pos} bytes after the value")
    return value


_CALL_KEYS = {"hook": 0, "data": 1, "meta": 2}


def unpack_call(data: bytes, max_depth: int = MAX_DEPTH) -> tuple[Any, Any, Any] | None:
    """`(hook, data, meta)` of a call request map (None where a key is missing), read
    without building the request map; None when the document is not a map.

    It accepts and refuses exactly what `unpack` does: each value is read at the
    depth it has inside the map, other keys are read and dropped, a repeated key's
    last value wins.
    """
    buf = bytes(data)
    size = len(buf)
    if not size:
        raise _truncated()
    b = buf[0]
    if 0x80 <= b <= 0x8F:
        n, pos = b & 0x0F, 1
    elif b == 0xDE or b == 0xDF:
        n, pos = _uint(buf, 1, 2 if b == 0xDE else 4)
    else:
        unpack(buf, max_depth)  # the same refusal as unpack, or a value that is no map
        return None
    if max_depth < 1:
        raise MsgpackError(f"containers nested deeper than {max_depth}")
    found: list[Any] = [None, None, None]
    keys = _CALL_KEYS
    try:
        for _ in range(n):
            b = buf[pos] if pos < size else -1
            if 0xA0 <= b <= 0xBF:  # a short str key, as every key of a request is
                end = pos + 1 + (b & 0x1F)
                if end > size:
                    raise _truncated()
                try:
                    key: Any = buf[pos + 1:end].decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise MsgpackError("a str that is not UTF-8") from exc
                pos = end
            else:
                key, pos = _value(buf, pos, 1, max_depth)
                try:
                    hash(key)
                except TypeError as exc:
                    raise MsgpackError("a map key that is an array or a map") from exc
            item, pos = _value(buf, pos, 1, max_depth)
            slot = keys.get(key) if type(key) is str else None
            if slot is not None:
                found[slot] = item
    except RecursionError as exc:
        raise MsgpackError("containers nested too deep for this interpreter") from exc
    if pos != size:
        raise MsgpackError(f"{size - pos} bytes after the value")
    return found[0], found[1], found[2]
