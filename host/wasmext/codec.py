"""MessagePack in and out of the sandbox, with the limits of ABI v1.

msgpack-python does the work; this module adds what the ABI demands on top:
a nesting-depth limit, string-only map keys, no extension types, and named
errors. Decoding never trusts a declared length: the unpacker refuses lengths
larger than the buffer it was given.
"""

from __future__ import annotations

from typing import Any

import msgpack

from wasmext.errors import EncodeError

__all__ = ["DecodeError", "check_depth", "decode", "encode"]


class DecodeError(ValueError):
    """The bytes are not an acceptable ABI document; the message says why."""


def _refuse_ext(code: int, data: bytes) -> Any:
    raise DecodeError(f"extension type {code} is not allowed")


def encode(value: Any) -> bytes:
    """Encode a host value; raises EncodeError for what MessagePack cannot carry."""
    try:
        return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(f"cannot encode as MessagePack: {exc}") from exc


def check_depth(value: Any, max_depth: int) -> None:
    """Raise DecodeError if containers nest deeper than max_depth or a map key is not a str."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > max_depth:
                raise DecodeError(f"nesting deeper than {max_depth}")
            for k, v in item.items():
                if not isinstance(k, str):
                    raise DecodeError(f"map key {k!r} is not a string")
                if isinstance(v, (dict, list)):
                    stack.append((v, depth + 1))
        elif isinstance(item, list):
            if depth > max_depth:
                raise DecodeError(f"nesting deeper than {max_depth}")
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))


def decode(data: bytes, max_depth: int = 64) -> Any:
    """Decode one complete document; raises DecodeError with the reason."""
    if not data:
        raise DecodeError("empty document")
    try:
        value = msgpack.unpackb(data, strict_map_key=False, ext_hook=_refuse_ext)
    except DecodeError:
        raise
    except msgpack.ExtraData as exc:
        raise DecodeError("trailing bytes after the document") from exc
    except UnicodeDecodeError as exc:
        raise DecodeError("string is not valid UTF-8") from exc
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise DecodeError(f"malformed MessagePack: {exc or type(exc).__name__}") from exc
    if isinstance(value, (dict, list)):
        check_depth(value, max_depth)
    return value
