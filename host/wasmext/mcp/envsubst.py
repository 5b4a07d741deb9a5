"""`${VAR}` substitution for configured commands, arguments, URLs and environments.

A missing variable becomes the empty string and is reported (the caller logs
a warning naming it); `$${` writes a literal `${`. Nothing else is special:
a lone `$` or `{` passes through.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["VAR_RE", "env_refs", "substitute"]

VAR_RE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def substitute(text: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """`text` with every `${NAME}` replaced from `env`; also the names that were missing."""
    missing: list[str] = []

    def replace(m: re.Match[str]) -> str:
        name = m.group(1)
        if name is None:
            return "${"
        if name not in env:
            missing.append(name)
            return ""
        return env[name]

    return VAR_RE.sub(replace, text), missing


def env_refs(raw: Any) -> set[str]:
    """Every `${VAR}` name anywhere in a decoded TOML value (its strings, at any depth)."""
    out: set[str] = set()
    stack = [raw]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.update(m.group(1) for m in VAR_RE.finditer(item) if m.group(1))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out
