"""Wheel build hook: the guest SDKs and the project's guides ride along as package data.

Every folder under guest-sdks/ (whatever languages there are: a new SDK folder
is picked up without touching the packaging) is copied into the wheel at
wasmext_cli/_data/guest-sdks/<lang>/, minus what a build or an install leaves
behind (node_modules, target, caches, built modules). `wasmext new` and
`wasmext build` read them with importlib.resources, so an installed wheel
needs no checkout.

Beside them, as in the checkout, go README.md, docs/ and the ABI's specification
(abi/SPEC.md, its WIT world and test vectors): `wasmext docs` reads them, and the
relative links between them (README to docs/, docs/ to ../abi/SPEC.md, an SDK's README
to ../../abi/SPEC.md) resolve inside wasmext_cli/_data as they do in the checkout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # the tests import this module to see what ships, without hatchling
    BuildHookInterface = object

SKIP_DIRS = {"node_modules", "target", "zig-cache", ".zig-cache", "zig-out", "__pycache__",
             ".git", "dist", "build"}
SKIP_SUFFIXES = {".wasm", ".tmp", ".stamp", ".rlib", ".pyc", ".tgz", ".crate"}
DATA = "wasmext_cli/_data"
DEST = f"{DATA}/guest-sdks"
# The guides: top-level files, and folders shipped whole (less SKIP_DIRS and SKIP_SUFFIXES).
GUIDE_FILES = ("README.md", "abi/SPEC.md")
GUIDE_DIRS = ("docs", "abi/wit", "abi/vectors")


def _shippable(path: Path, rel: Path) -> bool:
    return path.is_file() and path.suffix not in SKIP_SUFFIXES \
        and not any(part in SKIP_DIRS for part in rel.parts)


def sdk_files(root: Path) -> dict[str, str]:
    """Source path -> path in the wheel, for every shippable file of every SDK."""
    out: dict[str, str] = {}
    for path in sorted((root / "guest-sdks").rglob("*")):
        rel = path.relative_to(root / "guest-sdks")
        if _shippable(path, rel):
            out[str(path)] = f"{DEST}/{rel.as_posix()}"
    return out


def guide_files(root: Path) -> dict[str, str]:
    """Source path -> path in the wheel, for README.md, docs/ and the ABI's specification."""
    out = {str(root / name): f"{DATA}/{name}" for name in GUIDE_FILES}
    for folder in GUIDE_DIRS:
        for path in sorted((root / folder).rglob("*")):
            rel = path.relative_to(root)
            if _shippable(path, rel):
                out[str(path)] = f"{DATA}/{rel.as_posix()}"
    return out


class SdkDataHook(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root)
        build_data["force_include"].update({**sdk_files(root), **guide_files(root)})
