"""MessagePack for ABI v1 guests, in pure Python (the guest has no C extensions).

`pack` writes the smallest encoding of every value (abi/vectors/msgpack.json is
the contract: floats are float64, bytes are bin, tuples are arrays); `unpack`
reads any well-formed document up to `max_depth` levels and refuses anything
else with `MsgpackError`: truncation, trailing bytes, ext types, invalid UTF-8.

Inside a component this codec is most of a small call's guest time (CPython
runs interpreted by wasmtime, with fuel metering, where every bytecode and
every call of a C function costs hundreds of instructions), so both directions
are written to run as few of them as possible per value:

* the reader never checks a bound before an index or a slice: reading past the
  end raises IndexError (turned into "truncated" once, at the top) and a slice
  past the end leaves the position beyond the buffer, which the next read or
  the final length check refuses;
* short strings (and small ints in arrays) are read, and strings written, inline
  in the container's loop, without a call per value; loops are `while` loops;
* the writer appends parts to a list joined once; a string's header comes from a
  table of 256, and map keys from a bounded cache of their encodings;
* each container passes down how many levels it may still open (one comparison);
* `unpack_call` recognises the head of the last call's request (its "hook" and
  "data" keys around the same hook name) with one comparison.

docs/performance.md ("Component plugins") has the guest's instruction counts
behind these choices.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["MAX_DEPTH", "MsgpackError", "pack", "pack_answer", "unpack", "unpack_call"]

MAX_DEPTH = 64


class MsgpackError(ValueError):
    """A document that is not ABI v1 MessagePack, or a value that has no encoding."""


class _TooDeep(Exception):
    """Raised where a container would pass the depth limit; named at the top."""


_float64 = struct.Struct(">d")
_float32 = struct.Struct(">f")
_u16 = struct.Struct(">H")
_u32 = struct.Struct(">I")
_u64 = struct.Struct(">Q")
_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")

# -- writing ---------------------------------------------------------------------

# The header of a str of n bytes for n < 256: fixstr below 32, str8 from 32.
_STR_HEAD = [bytes((0xA0 | n,)) for n in range(32)] + [bytes((0xD9, n)) for n in range(32, 256)]
_UINT8_HEAD = [b"\xcc" + bytes((n,)) for n in range(256)]
_BYTE = [bytes((n,)) for n in range(256)]
_NONE, _TRUE, _FALSE, _FLOAT = b"\xc0", b"\xc3", b"\xc2", b"\xcb"

# Map keys repeat from call to call: their encodings (header and UTF-8) are kept,
# for strs of up to _KEY_CHARS characters, in at most _KEY_CACHE of them.
_KEY_CHARS = 32
_KEY_CACHE = 1024
_keys: dict[str, bytes] = {}


def _head(n: int, fix: int, fix_max: int, b16: int, b32: int) -> bytes:
    """A container's or a long str's/bin's length header (no 8-bit form)."""
    if n <= fix_max:
        return _BYTE[fix | n]
    if n <= 0xFFFF:
        return _BYTE[b16] + _u16.pack(n)
    if n <= 0xFFFFFFFF:
        return _BYTE[b32] + _u32.pack(n)
    raise MsgpackError(f"length {n} does not fit 32 bits")


def _int(n: int) -> bytes:
    if n >= 0:
        if n <= 0x7F:
            return _BYTE[n]
        if n <= 0xFF:
            return _UINT8_HEAD[n]
        if n <= 0xFFFF:
            return b"\xcd" + _u16.pack(n)
        if n <= 0xFFFFFFFF:
            return b"\xce" + _u32.pack(n)
        if n <= 0xFFFFFFFFFFFFFFFF:
            return b"\xcf" + _u64.pack(n)
    elif n >= -32:
        return _BYTE[n & 0xFF]
    elif n >= -0x80:
        return b"\xd0" + _i8.pack(n)
    elif n >= -0x8000:
        return b"\xd1" + _i16.pack(n)
    elif n >= -0x80000000:
        return b"\xd2" + _i32.pack(n)
    elif n >= -0x8000000000000000:
        return b"\xd3" + _i64.pack(n)
    raise MsgpackError(f"int {n} does not fit 64 bits")


def _str(v: str) -> bytes:
    raw = str.encode(v)
    if len(raw) < 256:
        return _STR_HEAD[len(raw)] + raw
    return _head(len(raw), 0, -1, 0xDA, 0xDB) + raw


def _key(key: Any, out: list[bytes], room: int) -> None:
    """A map key missing from the cache: written, and kept when it is a short str."""
    if type(key) is str:
        raw = _str(key)
        if len(key) <= _KEY_CHARS and len(_keys) < _KEY_CACHE:
            _keys[key] = raw
        out.append(raw)
    else:
        _pack(key, out, room)


def _pack(v: Any, out: list[bytes], room: int) -> None:
    """Append `v`'s parts; `room`: how many containers may still open around its contents."""
    t = type(v)
    if t is str:
        raw = v.encode()
        if len(raw) < 256:
            out.append(_STR_HEAD[len(raw)])
            out.append(raw)
        else:
            out.append(_str(v))
    elif t is dict:
        if room < 1:
            raise _TooDeep
        room -= 1
        n = len(v)
        out.append(_BYTE[0x80 | n] if n < 16 else _head(n, 0x80, 15, 0xDE, 0xDF))
        keys = _keys
        for key, item in v.items():
            try:
                out.append(keys[key])
            except KeyError:
                _key(key, out, room)
            if type(item) is str:  # str values without a call of _pack
                raw = item.encode()
                if len(raw) < 256:
                    out.append(_STR_HEAD[len(raw)])
                    out.append(raw)
                else:
                    out.append(_str(item))
            else:
                _pack(item, out, room)
    elif t is int:
        out.append(_BYTE[v] if 0 <= v <= 0x7F else _int(v))
    elif t is list or t is tuple:
        if room < 1:
            raise _TooDeep
        room -= 1
        n = len(v)
        out.append(_BYTE[0x90 | n] if n < 16 else _head(n, 0x90, 15, 0xDC, 0xDD))
        for item in v:
            if type(item) is str:
                raw = item.encode()
                if len(raw) < 256:
                    out.append(_STR_HEAD[len(raw)])
                    out.append(raw)
                else:
                    out.append(_str(item))
            else:
                _pack(item, out, room)
    elif v is None:
        out.append(_NONE)
    elif t is bool:
        out.append(_TRUE if v else _FALSE)
    elif t is float:
        out.append(_FLOAT)
        out.append(_float64.pack(v))
    else:
        _pack_other(v, out, room)


def _pack_other(v: Any, out: list[bytes], room: int) -> None:
    """Bytes, and subclasses of the common types (an IntEnum, a str subclass)."""
    if isinstance(v, (bytes, bytearray, memoryview)):
        raw = bytes(v)
        n = len(raw)
        out.append(b"\xc4" + _BYTE[n] if n <= 0xFF else _head(n, 0, -1, 0xC5, 0xC6))
        out.append(raw)
    elif isinstance(v, bool):
        out.append(_TRUE if v else _FALSE)
    elif isinstance(v, int):
        out.append(_int(v))
    elif isinstance(v, float):
        out.append(_FLOAT)
        out.append(_float64.pack(v))
    elif isinstance(v, str):
        out.append(_str(v))
    elif isinstance(v, (list, tuple)):
        if room < 1:
            raise _TooDeep
        out.append(_head(len(v), 0x90, 15, 0xDC, 0xDD))
        for item in v:
            _pack(item, out, room - 1)
    elif isinstance(v, dict):
        if room < 1:
            raise _TooDeep
        out.append(_head(len(v), 0x80, 15, 0xDE, 0xDF))
        for key, item in v.items():
            _pack(key, out, room - 1)
            _pack(item, out, room - 1)
    else:
        raise MsgpackError(f"cannot encode a {type(v).__name__}")


def _no_encoding(exc: BaseException) -> MsgpackError:
    if isinstance(exc, _TooDeep):
        return MsgpackError(f"containers nested deeper than {MAX_DEPTH}")
    if isinstance(exc, UnicodeEncodeError):
        return MsgpackError(f"a str that has no UTF-8 form: {exc.reason}")
    return MsgpackError("containers nested too deep for this interpreter")  # RecursionError


_WRITE_ERRORS = (_TooDeep, UnicodeEncodeError, RecursionError)


def pack(value: Any) -> bytes:
    """The canonical MessagePack bytes of `value`."""
    out: list[bytes] = []
    try:
        _pack(value, out, MAX_DEPTH)
    except _WRITE_ERRORS as exc:
        raise _no_encoding(exc) from None
    return b"".join(out)


# {"ok": true, "value": ...}: the head of nearly every call answer, written once.
_ANSWER_HEAD = b"\x82\xa2ok\xc3\xa5value"


def pack_answer(value: Any) -> bytes:
    """The bytes of `pack({"ok": True, "value": value})`, without building that map."""
    out = [_ANSWER_HEAD]
    try:  # the value sits inside the answer map: one level fewer for its contents
        _pack(value, out, MAX_DEPTH - 1)
    except _WRITE_ERRORS as exc:
        raise _no_encoding(exc) from None
    return b"".join(out)


# -- reading ---------------------------------------------------------------------

_SIMPLE = {0xC0: None, 0xC2: False, 0xC3: True}


def _array(buf: bytes, pos: int, n: int, room: int) -> tuple[list[Any], int]:
    if room < 1:
        raise _TooDeep
    room -= 1
    out: list[Any] = []
    while n:
        n -= 1
        b = buf[pos]
        if 0xA0 <= b <= 0xBF:  # a short str, read here
            pos += 1
            end = pos + b - 0xA0
            out.append(buf[pos:end].decode())
            pos = end
        elif b <= 0x7F:
            out.append(b)
            pos += 1
        else:
            item, pos = _value(buf, pos, room)
            out.append(item)
    return out, pos


def _map(buf: bytes, pos: int, n: int, room: int) -> tuple[dict[Any, Any], int]:
    if room < 1:
        raise _TooDeep
    room -= 1
    out: dict[Any, Any] = {}
    while n:
        n -= 1
        b = buf[pos]
        if 0xA0 <= b <= 0xBF:  # a short str key, as nearly every key is: read here
            end = pos + b - 0x9F
            key = buf[pos + 1:end].decode()
        else:
            key, end = _value(buf, pos, room)
        b = buf[end]
        try:
            if 0xA0 <= b <= 0xBF:  # a str value up to 255 bytes: read here too
                pos = end + b - 0x9F
                out[key] = buf[end + 1:pos].decode()
            elif b == 0xD9:
                pos = end + 2 + buf[end + 1]
                out[key] = buf[end + 2:pos].decode()
            else:
                out[key], pos = _value(buf, end, room)
        except TypeError as exc:  # an array or map as a key: not hashable here
            raise MsgpackError("a map key that is an array or a map") from exc
    return out, pos


def _value(buf: bytes, pos: int, room: int) -> tuple[Any, int]:
    """The value at `pos` and the position after it; `room`: containers it may open."""
    b = buf[pos]
    pos += 1
    if b >= 0xA0:
        if b <= 0xBF:
            end = pos + b - 0xA0
            return buf[pos:end].decode(), end
        if b >= 0xE0:
            return b - 0x100, pos
    elif b <= 0x7F:
        return b, pos
    elif b <= 0x8F:
        return _map(buf, pos, b - 0x80, room)
    else:
        return _array(buf, pos, b - 0x90, room)
    if b <= 0xC3:
        if b == 0xC1:
            raise MsgpackError("type byte 0xc1 is not part of ABI v1")
        return _SIMPLE[b], pos
    if b == 0xD9:
        pos += 1
        end = pos + buf[pos - 1]
        return buf[pos:end].decode(), end
    if b == 0xCC:
        return buf[pos], pos + 1
    if b == 0xCB:
        return _float64.unpack_from(buf, pos)[0], pos + 8
    if b <= 0xC6:
        if b == 0xC4:
            n, pos = buf[pos], pos + 1
        elif b == 0xC5:
            n, pos = _u16.unpack_from(buf, pos)[0], pos + 2
        else:
            n, pos = _u32.unpack_from(buf, pos)[0], pos + 4
        end = pos + n
        return buf[pos:end], end
    if b <= 0xC9:
        raise MsgpackError(f"type byte {b:#04x} (an ext type) is not part of ABI v1")
    if b == 0xCA:
        return _float32.unpack_from(buf, pos)[0], pos + 4
    if b == 0xCD:
        return _u16.unpack_from(buf, pos)[0], pos + 2
    if b == 0xCE:
        return _u32.unpack_from(buf, pos)[0], pos + 4
    if b == 0xCF:
        return _u64.unpack_from(buf, pos)[0], pos + 8
    if b == 0xD0:
        return _i8.unpack_from(buf, pos)[0], pos + 1
    if b == 0xD1:
        return _i16.unpack_from(buf, pos)[0], pos + 2
    if b == 0xD2:
        return _i32.unpack_from(buf, pos)[0], pos + 4
    if b == 0xD3:
        return _i64.unpack_from(buf, pos)[0], pos + 8
    if b == 0xDA:
        end = pos + 2 + _u16.unpack_from(buf, pos)[0]
        return buf[pos + 2:end].decode(), end
    if b == 0xDB:
        end = pos + 4 + _u32.unpack_from(buf, pos)[0]
        return buf[pos + 4:end].decode(), end
    if b == 0xDC:
        return _array(buf, pos + 2, _u16.unpack_from(buf, pos)[0], room)
    if b == 0xDD:
        return _array(buf, pos + 4, _u32.unpack_from(buf, pos)[0], room)
    if b == 0xDE:
        return _map(buf, pos + 2, _u16.unpack_from(buf, pos)[0], room)
    if b == 0xDF:
        return _map(buf, pos + 4, _u32.unpack_from(buf, pos)[0], room)
    raise MsgpackError(f"type byte {b:#04x} (an ext type) is not part of ABI v1")


def _refusal(exc: BaseException, max_depth: int) -> MsgpackError:
    """The MsgpackError for what a read raised: the checks the reader leaves out."""
    if isinstance(exc, _TooDeep):
        return MsgpackError(f"containers nested deeper than {max_depth}")
    if isinstance(exc, RecursionError):  # a max_depth above what this stack holds
        return MsgpackError("containers nested too deep for this interpreter")
    if isinstance(exc, UnicodeDecodeError):
        # A str cut short by the document's end reads as broken UTF-8: truncation.
        if exc.end >= len(exc.object) and exc.reason == "unexpected end of data":
            return MsgpackError("truncated document or a str that is not UTF-8")
        return MsgpackError("a str that is not UTF-8")
    return MsgpackError("truncated document")  # IndexError, struct.error


_READ_ERRORS = (IndexError, struct.error, UnicodeDecodeError, _TooDeep, RecursionError)


def _end(buf: bytes, pos: int) -> None:
    if pos != len(buf):
        if pos > len(buf):  # a str or bin slice ran past the end
            raise MsgpackError("truncated document")
        raise MsgpackError(f"{len(buf) - pos} bytes after the value")


def unpack(data: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The one value `data` holds; MsgpackError for anything else."""
    buf = data if type(data) is bytes else bytes(data)
    try:
        b = buf[0]
        if 0x80 <= b <= 0x8F:  # most documents are a map
            value, pos = _map(buf, 1, b - 0x80, max_depth)
        else:
            value, pos = _value(buf, 0, max_depth)
    except _READ_ERRORS as exc:
        raise _refusal(exc, max_depth) from None
    if pos != len(buf):
        _end(buf, pos)
    return value


_CALL_KEYS = {"hook": 0, "data": 1, "meta": 2}
_HOOK_KEY, _DATA_KEY = b"\xa4hook", b"\xa4data"
# The last request's bytes from its "hook" key to its "data" key, and its hook
# name (0xc1 is no MessagePack byte: the first request matches nothing).
_last_head: list[tuple[bytes, str]] = [(b"\xc1", "")]


def _data(buf: bytes, pos: int, room: int) -> tuple[Any, int]:
    b = buf[pos]
    if 0x80 <= b <= 0x8F:  # a map, as most hooks' data is
        return _map(buf, pos + 1, b - 0x80, room)
    return _value(buf, pos, room)


def unpack_call(data: bytes, max_depth: int = MAX_DEPTH) -> tuple[Any, Any, Any] | None:
    """`(hook, data, meta)` of a call request map (None where a key is missing), read
    without building the request map; None when the document is not a map.

    It accepts and refuses exactly what `unpack` does: each value is read at the
    depth it has inside the map, other keys are read and dropped, a repeated key's
    last value wins.
    """
    buf = data if type(data) is bytes else bytes(data)
    try:
        b = buf[0]
        if 0x80 <= b <= 0x8F:
            n, pos = b - 0x80, 1
        elif b == 0xDE:
            n, pos = _u16.unpack_from(buf, 1)[0], 3
        elif b == 0xDF:
            n, pos = _u32.unpack_from(buf, 1)[0], 5
        else:
            unpack(buf, max_depth)  # the same refusal as unpack, or a value that is no map
            return None
        if max_depth < 1:
            raise _TooDeep
        room = max_depth - 1
        found: list[Any] = [None, None, None]
        if n >= 2:
            # The host's layout: "hook" (a short str) first, then "data". The bytes
            # from "hook" to "data" of the last such request are kept with its hook
            # name: a hook called again is recognised by one comparison.
            head, name = _last_head[0]
            if buf.startswith(head, pos):
                found[0] = name
                pos += len(head)
                n -= 2
                b = buf[pos]
                if 0x80 <= b <= 0x8F:
                    found[1], pos = _map(buf, pos + 1, b - 0x80, room)
                else:
                    found[1], pos = _value(buf, pos, room)
            elif buf.startswith(_HOOK_KEY, pos) and 0xA0 <= buf[pos + 5] <= 0xBF:
                start = pos
                pos += 6
                end = pos + buf[pos - 1] - 0xA0
                found[0] = buf[pos:end].decode()
                pos = end
                n -= 1
                if buf.startswith(_DATA_KEY, pos):
                    pos += 5
                    _last_head[0] = (buf[start:pos], found[0])
                    n -= 1
                    found[1], pos = _data(buf, pos, room)
        keys = _CALL_KEYS
        while n:
            n -= 1
            b = buf[pos]
            if 0xA0 <= b <= 0xBF:  # a short str key, as every key of a request is
                pos += 1
                end = pos + b - 0xA0
                key: Any = buf[pos:end].decode()
                pos = end
                slot = keys.get(key)
            else:
                key, pos = _value(buf, pos, room)
                try:
                    hash(key)
                except TypeError as exc:
                    raise MsgpackError("a map key that is an array or a map") from exc
                slot = keys.get(key) if type(key) is str else None
            item, pos = _value(buf, pos, room)
            if slot is not None:
                found[slot] = item
    except _READ_ERRORS as exc:
        raise _refusal(exc, max_depth) from None
    if pos != len(buf):
        _end(buf, pos)
    return found[0], found[1], found[2]
