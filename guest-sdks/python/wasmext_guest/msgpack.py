"""MessagePack for ABI v1 guests, in pure Python (the guest has no C extensions).

`pack` writes the smallest encoding of every value (abi/vectors/msgpack.json is
the contract: floats are float64, bytes are bin, tuples are arrays); `unpack`
reads any well-formed document up to `max_depth` levels and refuses anything
else with `MsgpackError`: truncation, trailing bytes, ext types, invalid UTF-8.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["MAX_DEPTH", "MsgpackError", "pack", "unpack"]

MAX_DEPTH = 64


class MsgpackError(ValueError):
    """A document that is not ABI v1 MessagePack, or a value that has no encoding."""


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


def _pack(v: Any, out: bytearray, depth: int) -> None:
    if depth > MAX_DEPTH and isinstance(v, (list, tuple, dict)):
        raise MsgpackError(f"containers nested deeper than {MAX_DEPTH}")
    if v is None:
        out.append(0xC0)
    elif v is True:
        out.append(0xC3)
    elif v is False:
        out.append(0xC2)
    elif isinstance(v, int):
        _pack_int(v, out)
    elif isinstance(v, float):
        out += b"\xcb" + struct.pack(">d", v)
    elif isinstance(v, str):
        raw = v.encode("utf-8")
        _pack_len(len(raw), 0xA0, 31, 0xD9, 0xDA, 0xDB, out)
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


class _Reader:
    def __init__(self, data: bytes, max_depth: int) -> None:
        self.data = data
        self.pos = 0
        self.max_depth = max_depth

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise MsgpackError("truncated document")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def uint(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def text(self, n: int) -> str:
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MsgpackError("a str that is not UTF-8") from exc

    def array(self, n: int, depth: int) -> list[Any]:
        self.nest(depth)
        return [self.value(depth + 1) for _ in range(n)]

    def map(self, n: int, depth: int) -> dict[Any, Any]:
        self.nest(depth)
        out: dict[Any, Any] = {}
        for _ in range(n):
            key = self.value(depth + 1)
            try:
                out[key] = self.value(depth + 1)
            except TypeError as exc:  # an array or map as a key: not hashable here
                raise MsgpackError("a map key that is an array or a map") from exc
        return out

    def nest(self, depth: int) -> None:
        if depth + 1 > self.max_depth:
            raise MsgpackError(f"containers nested deeper than {self.max_depth}")

    def value(self, depth: int) -> Any:
        """The next value; `depth` is the number of containers around it."""
        b = self.uint(1)
        if b <= 0x7F:
            return b
        if b >= 0xE0:
            return b - 0x100
        if 0xA0 <= b <= 0xBF:
            return self.text(b & 0x1F)
        if 0x90 <= b <= 0x9F:
            return self.array(b & 0x0F, depth)
        if 0x80 <= b <= 0x8F:
            return self.map(b & 0x0F, depth)
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if b in simple:
            return simple[b]
        if b in (0xCC, 0xCD, 0xCE, 0xCF):
            return self.uint(1 << (b - 0xCC))
        if b in (0xD0, 0xD1, 0xD2, 0xD3):
            return int.from_bytes(self.take(1 << (b - 0xD0)), "big", signed=True)
        if b == 0xCA:
            return float(struct.unpack(">f", self.take(4))[0])
        if b == 0xCB:
            return float(struct.unpack(">d", self.take(8))[0])
        if b in (0xD9, 0xDA, 0xDB):
            return self.text(self.uint(1 << (b - 0xD9)))
        if b in (0xC4, 0xC5, 0xC6):
            return self.take(self.uint(1 << (b - 0xC4)))
        if b in (0xDC, 0xDD):
            return self.array(self.uint(2 if b == 0xDC else 4), depth)
        if b in (0xDE, 0xDF):
            return self.map(self.uint(2 if b == 0xDE else 4), depth)
        raise MsgpackError(f"type byte {b:#04x} is not part of ABI v1")


def unpack(data: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """The one value `data` holds; MsgpackError for anything else."""
    reader = _Reader(bytes(data), max_depth)
    value = reader.value(0)
    if reader.pos != len(reader.data):
        raise MsgpackError(f"{len(reader.data) - reader.pos} bytes after the value")
    return value
