"""tomllib on 3.11+, tomli before; and reading configuration files under caps.

plugin.toml comes from whoever wrote the plugin, so every file the host parses
is read with a size cap (checked before parsing) and a nesting cap (a cheap
pre-scan, because tomllib and json recurse once per level, and a walk of the
result, because dotted keys nest without brackets). Whatever goes wrong comes
out as `ConfigTextError` (a ValueError) with a one-line message, or OSError.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from wasmext.errors import UnsafeFile
from wasmext.files import read_regular

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

from wasmext.errors import ConfigTextError

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "ConfigTextError", "parse_text", "read_capped",
           "tomllib"]

MAX_FILE_BYTES = 1 << 20  # wasmext.toml and policy files; plugin.toml has its own cap
MAX_DEPTH = 32            # arrays and tables inside each other

# Strings and comments (where brackets mean nothing), or a bracket.
_TOKENS = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\''
                     r"|#[^\n]*|[\[\]{}]")


def read_capped(path: Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """A regular file's bytes, refusing it past `max_bytes` without reading it all.

    Through `files.read_regular`: a FIFO or device named like a config file
    cannot hang the host; it is refused as not a regular file.
    """
    try:
        return read_regular(path, max_bytes)
    except UnsafeFile as exc:
        raise ConfigTextError(exc.strerror or exc.message) from exc


def _check_nesting(text: str, max_depth: int) -> None:
    depth = 0
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if tok in ("[", "{"):
            depth += 1
            if depth > max_depth:
                raise ConfigTextError(f"nested deeper than {max_depth} levels")
        elif tok in ("]", "}"):
            depth = max(depth - 1, 0)


def _check_depth(value: Any, max_depth: int) -> None:
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                raise ConfigTextError(f"nested deeper than {max_depth} levels")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((c, depth + 1) for c in children)


def parse_text(raw: bytes | str, *, kind: str = "toml", max_bytes: int = MAX_FILE_BYTES,
               max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """Decode TOML (or JSON with kind="json") into a table, under the caps.

    Raises ConfigTextError only, whatever the input.
    """
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ConfigTextError(f"larger than {max_bytes} bytes")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        _check_nesting(text, max_depth)
        data = json.loads(text) if kind == "json" else tomllib.loads(text)
    except ConfigTextError:
        raise
    except UnicodeError as exc:
        raise ConfigTextError(f"not UTF-8: {exc}") from exc
    except RecursionError as exc:
        raise ConfigTextError("nested too deeply") from exc
    except Exception as exc:  # tomllib/json refuse with ValueError; be sure of anything else
        raise ConfigTextError(f"not valid {kind.upper()}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigTextError(f"not valid {kind.upper()}: the top level must be a table")
    _check_depth(data, max_depth)
    return data
