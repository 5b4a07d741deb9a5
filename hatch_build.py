"""Wheel build hook: the guest SDKs ride along as package data of wasmext_cli.

Every folder under guest-sdks/ (whatever languages there are: a new SDK folder
is picked up without touching the packaging) is copied into the wheel at
wasmext_cli/_data/guest-sdks/<lang>/, minus what a build or an install leaves
behind (node_modules, target, caches, built modules). `wasmext new` and
`wasmext build` read them with importlib.resources, so an installed wheel
needs no checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SKIP_DIRS = {"node_modules", "target", "zig-cache", ".zig-cache", "zig-out", "__pycache__",
             ".git", "dist", "build"}
SKIP_SUFFIXES = {".wasm", ".tmp", ".stamp", ".rlib", ".pyc", ".tgz", ".crate"}
DEST = "wasmext_cli/_data/guest-sdks"


def sdk_files(root: Path) -> dict[str, str]:
    """Source path -> path in the wheel, for every shippable file of every SDK."""
    out: dict[str, str] = {}
    for path in sorted((root / "guest-sdks").rglob("*")):
        rel = path.relative_to(root / "guest-sdks")
        if any(part in SKIP_DIRS for part in rel.parts) or not path.is_file():
            continue
        if path.suffix in SKIP_SUFFIXES:
            continue
        out[str(path)] = f"{DEST}/{rel.as_posix()}"
    return out


class SdkDataHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        build_data["force_include"].update(sdk_files(Path(self.root)))
