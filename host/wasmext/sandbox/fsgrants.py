"""Folder grants as strings: `fs:PATH[:ro|rw]` parsed and checked, and their bounds.

The grant is the operator's: PATH is an absolute host folder (never `/`), shown to
the guest at `/<folder name>`, read-only unless it ends in `:rw`. `sandbox.wasifs`
serves it to core modules; a component gets it as a WASI p2 preopen
(`preopen_args`). `FsQuota` is what `[fs]` in wasmext.toml sets.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FsGrant", "FsQuota", "fs_grant_problem", "fs_grants", "fs_path_problem",
           "parse_fs_grant", "preopen_args", "reaching"]


@dataclass(frozen=True)
class FsGrant:
    """One `fs:` grant: the host folder, whether the guest may change it, and the
    capability string it came from (checked again at every operation)."""

    capability: str
    path: str
    writable: bool

    @property
    def guest_path(self) -> str:
        """Where the guest sees the folder: `/` and the folder's name."""
        return "/" + os.path.basename(self.path.rstrip("/"))


def parse_fs_grant(capability: str) -> FsGrant | None:
    """The folder grant `capability` says (`fs:PATH[:ro|rw]`), or None when it is not
    a well-formed one (see `fs_grant_problem`)."""
    if not capability.startswith("fs:"):
        return None
    path, writable = capability[3:], False
    if path.endswith((":ro", ":rw")):
        path, writable = path[:-3], path.endswith(":rw")
    if fs_path_problem(path) is not None:
        return None
    return FsGrant(capability, os.path.normpath(path), writable)


def fs_path_problem(path: str) -> str | None:
    """Why PATH of an `fs:` grant cannot be granted, or None."""
    if not path:
        return "has no folder; write fs:/absolute/folder[:ro|rw]"
    if not path.startswith("/"):
        return "names a relative folder; grants name absolute folders"
    if "\0" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "has a control character in its folder"
    if os.path.normpath(path) == "/":
        return "would grant the whole filesystem; name a folder"
    return None


def fs_grant_problem(capability: str) -> str | None:
    """Why an `fs:...` capability is malformed, or None when it grants a folder."""
    path = capability[3:]
    if path.endswith((":ro", ":rw")):
        path = path[:-3]
    problem = fs_path_problem(path)
    shown = capability if len(capability) <= 80 else capability[:77] + "..."
    return None if problem is None else f"{shown!r} {problem}"


def fs_grants(grants: Iterable[str]) -> list[FsGrant]:
    """The folder grants among `grants`, one per guest path (the first by host path
    wins a clash of folder names), in guest-path order."""
    out: dict[str, FsGrant] = {}
    parsed = [g for g in (parse_fs_grant(c) for c in grants) if g is not None]
    for grant in sorted(parsed, key=lambda g: (g.path, g.capability)):
        out.setdefault(grant.guest_path, grant)
    return [out[k] for k in sorted(out)]


def reaching(grants: Iterable[str], owned: Iterable[str | os.PathLike[str]]
             ) -> frozenset[str]:
    """The folder grants among `grants` whose folder holds one of the `owned` folders or
    lies inside one (symlinks resolved): the host's data dir and plugin folders, where a
    plugin could read every plugin's state and the host's tokens, or write approvals."""
    homes = [Path(os.path.realpath(p)) for p in owned]
    out = set()
    for grant in filter(None, (parse_fs_grant(c) for c in grants)):
        real = Path(os.path.realpath(grant.path))
        if any(home.is_relative_to(real) or real.is_relative_to(home) for home in homes):
            out.add(grant.capability)
    return frozenset(out)


def preopen_args(grants: Iterable[str]) -> list[tuple[str, str, bool]]:
    """(host folder, guest path, writable) for each folder grant: a component's preopens."""
    return [(g.path, g.guest_path, g.writable) for g in fs_grants(grants)
            if os.path.isdir(g.path)]


@dataclass(frozen=True)
class FsQuota:
    """Bounds of a folder grant: bytes and entries in the folder (each folder), and
    bytes read or written in one call (each instance)."""

    max_bytes: int = 256 * 2**20
    max_files: int = 10_000
    max_io_bytes: int = 64 * 2**20
