"""Finding plugin folders: user directory first, then workspace; never following
a symlink out of a plugin folder, and never letting one plugin stop the rest."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from wasmext.errors import LoadError, ManifestError, WasmextError
from wasmext.manifest import Manifest, load_manifest

__all__ = ["Discovered", "discover"]

log = logging.getLogger("wasmext.discovery")


@dataclass(frozen=True)
class Discovered:
    """One plugin folder: its manifest, or the error that keeps it out."""

    source: str
    folder: Path
    manifest: Manifest | None = None
    error: WasmextError | None = None


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def check_folder(folder: Path, manifest: Manifest) -> None:
    """Refuse symlink tricks: the folder itself, or its manifest or module
    pointing outside it."""
    if folder.is_symlink():
        raise LoadError(f"{folder}: plugin folder is a symlink; refusing it",
                        plugin_id=manifest.id)
    for part in (folder / "plugin.toml", manifest.wasm_path):
        if part.exists() and not _inside(part, folder):
            raise LoadError(f"{part}: resolves outside its plugin folder", plugin_id=manifest.id)


def discover(dirs: list[tuple[str, Path]]) -> list[Discovered]:
    """Every plugin folder under `dirs` (source, directory), in precedence order:
    by directory, then by folder name. A later folder with an id seen before is
    reported as a duplicate, not loaded."""
    found: list[Discovered] = []
    seen: dict[str, Path] = {}
    for source, directory in dirs:
        if not directory.is_dir():
            continue
        for folder in sorted(p for p in directory.iterdir() if (p / "plugin.toml").exists()):
            try:
                manifest = load_manifest(folder / "plugin.toml")
                check_folder(folder, manifest)
                if manifest.id in seen:
                    raise ManifestError(f"{folder}: id {manifest.id!r} is already used by "
                                        f"{seen[manifest.id]}", path=folder / "plugin.toml",
                                        field="id", plugin_id=manifest.id)
            except WasmextError as err:
                log.error("skipping plugin folder %s: %s", folder, err)
                found.append(Discovered(source, folder, None, err))
                continue
            seen[manifest.id] = folder
            found.append(Discovered(source, folder, manifest))
    return found
