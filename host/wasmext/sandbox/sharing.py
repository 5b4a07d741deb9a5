"""Registrations shared between copies of one module.

Loading a plugin normally starts an instance to ask the guest what it registers.
A guest whose registration map depends only on its settings (an SDK's static
hook table, say) answers `"shareable": true`; then a later load of the same code
with the same settings, limits and grants takes that map and starts its first
instance only when first called. That instance still registers, and a map that
differs from the shared one is an `InvalidOutput` fault: the promise is checked,
not trusted.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_SHARED", "share_registration", "shared_registration"]

MAX_SHARED = 64  # distinct (settings, limits, grants) per module kept


def shared_registration(module: object, key: str) -> dict[str, Any] | None:
    table: dict[str, dict[str, Any]] | None = getattr(module, "registrations", None)
    return None if table is None else table.get(key)


def share_registration(module: object, key: str, raw: dict[str, Any]) -> None:
    table: dict[str, dict[str, Any]] | None = getattr(module, "registrations", None)
    if table is not None and (key in table or len(table) < MAX_SHARED):
        table[key] = raw
