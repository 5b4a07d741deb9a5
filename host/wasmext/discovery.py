"""Finding plugin folders: user directory first, then workspace; never following
a symlink out of a plugin folder, and never letting one plugin stop the rest."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from wasmext.errors import LoadError, ManifestError, WasmextError
from wasmext.manifest import Manifest, load_folder

__all__ = ["Discovered", "as_load_error", "discover"]

log = logging.getLogger("wasmext.discovery")


@dataclass(frozen=True)
class Discovered:
    """One plugin folder: its manifest, or the error that keeps it out."""

    source: str
    folder: Path
    manifest: Manifest | None = None
    error: WasmextError | None = None


def as_load_error(folder: Path, exc: BaseException) -> WasmextError:
    """Any failure of one plugin folder as a WasmextError (one line, no traceback)."""
    if isinstance(exc, WasmextError):
        return exc
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    return LoadError(f"{folder}: {type(exc).__name__}{': ' if detail else ''}{detail}")


def _candidates(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if (p / "plugin.toml").exists())
    except OSError as exc:
        log.error("cannot list plugin directory %s: %s", directory, exc)
        return []


def discover(dirs: list[tuple[str, Path]]) -> list[Discovered]:
    """Every plugin folder under `dirs` (source, directory), in precedence order:
    by directory, then by folder name. A later folder with an id seen before is
    reported as a duplicate, not loaded. Whatever goes wrong with one folder
    (any exception) is reported for that folder; the others are still found."""
    found: list[Discovered] = []
    seen: dict[str, Path] = {}
    for source, directory in dirs:
        if not directory.is_dir():
            continue
        for folder in _candidates(directory):
            try:
                manifest = load_folder(folder)
                if manifest.id in seen:
                    raise ManifestError(f"{folder}: id {manifest.id!r} is already used by "
                                        f"{seen[manifest.id]}", path=folder / "plugin.toml",
                                        field="id", plugin_id=manifest.id)
            except Exception as exc:  # one folder never stops the rest
                err = as_load_error(folder, exc)
                log.error("skipping plugin folder %s: %s", folder, err)
                found.append(Discovered(source, folder, None, err))
                continue
            seen[manifest.id] = folder
            found.append(Discovered(source, folder, manifest))
    return found
