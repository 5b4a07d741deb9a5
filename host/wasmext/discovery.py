"""Finding plugin folders: user directory first, then workspace, then (when the
config enables it) folders that installed Python packages declare under the
`wasmext.plugins` entry point; never following a symlink out of a plugin folder,
never importing a package, and never letting one plugin stop the rest."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from wasmext.errors import LoadError, ManifestError, UnsafeFolder, WasmextError
from wasmext.manifest import Manifest, load_folder

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = ["ENTRY_POINT_GROUP", "PACKAGES", "Discovered", "as_load_error", "discover",
           "package_folders"]

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


ENTRY_POINT_GROUP = "wasmext.plugins"
# The source whose "directory" stands for every installed package's entry points
# (HostConfig.plugin_dirs adds it when [plugins] entry_points = true).
PACKAGES = ("package", Path("<wasmext.plugins entry points>"))
# More entry points than any real environment has: a hostile one never makes
# discovery read an unbounded list.
MAX_ENTRY_POINTS = 1000
_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}$")


def _shown(text: str) -> str:
    return repr(text[:80])  # package metadata is the plugin author's text


def _package_folder(ep: EntryPoint) -> Path:
    """The plugin folder an entry point names: `id = "package.module"`, a folder of the
    entry point's own distribution holding plugin.toml. Nothing is imported."""
    if not _MODULE_RE.match(ep.value):  # also no ":object": a folder, never code
        raise LoadError(f"entry point {_shown(ep.name)}: {_shown(ep.value)} must name a "
                        "package folder (a dotted module path, no ':object')")
    dist = ep.dist
    if dist is None:
        raise LoadError(f"entry point {_shown(ep.name)}: no installed distribution")
    rel = PurePosixPath(*ep.value.split("."))
    # Only a folder its own distribution installed: an entry point cannot point the
    # host at another package's files (or at anything outside site-packages).
    owned = {str(PurePosixPath(f)) for f in (dist.files or [])}
    if str(rel / "plugin.toml") not in owned:
        raise UnsafeFolder(f"entry point {_shown(ep.name)}: {_shown(ep.value)}/plugin.toml "
                           f"is not a file of distribution {_shown(dist.metadata['Name'] or '')}")
    return Path(str(dist.locate_file(str(rel))))


def package_folders() -> list[tuple[str, Path | WasmextError]]:
    """(entry point name, plugin folder or the error keeping it out) for every installed
    `wasmext.plugins` entry point, by name."""
    from importlib.metadata import entry_points  # only with [plugins] entry_points = true

    found: list[tuple[str, Path | WasmextError]] = []
    eps = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: (ep.name, ep.value))
    if len(eps) > MAX_ENTRY_POINTS:
        log.error("%d wasmext.plugins entry points; looking at the first %d", len(eps),
                  MAX_ENTRY_POINTS)
    for ep in eps[:MAX_ENTRY_POINTS]:
        try:
            found.append((ep.name, _package_folder(ep)))
        except Exception as exc:  # one package never stops the rest
            found.append((ep.name, as_load_error(Path(ep.value[:80]), exc)))
    return found


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
        names: dict[Path, str] = {}
        if (source, directory) == PACKAGES:
            folders = []
            for name, where in package_folders():
                if isinstance(where, Path):
                    folders.append(where)
                    names[where] = name
                else:
                    log.error("skipping plugin package %s: %s", _shown(name), where)
                    found.append(Discovered(source, directory, None, where))
        elif directory.is_dir():
            folders = _candidates(directory)
        else:
            continue
        for folder in folders:
            try:
                manifest = load_folder(folder)
                if folder in names and names[folder] != manifest.id:
                    raise ManifestError(f"{folder}: entry point {_shown(names[folder])} names "
                                        f"plugin {manifest.id!r}; they must be the same",
                                        path=folder / "plugin.toml", field="id",
                                        plugin_id=manifest.id)
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
