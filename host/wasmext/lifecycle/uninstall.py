"""Uninstalling a plugin: unload it, remove its folder, and (asked to) its state.

The folder is first renamed to a dot name beside it (one atomic step, which
discovery ignores), then deleted; the state of every scope (global and every
session) goes with `purge_state`. Recorded approvals are revoked. Each
uninstall is logged and counted as `extension.registration.total{action=
"unregister"}`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wasmext.discovery import PACKAGES, Discovered, discover
from wasmext.errors import ConfigError, NotInstalled
from wasmext.files import fsync_dir
from wasmext.lifecycle.approvals import ApprovalStore

if TYPE_CHECKING:
    from wasmext.host import Host

__all__ = ["UninstallReport", "find_folder", "uninstall"]

log = logging.getLogger("wasmext.lifecycle")


@dataclass(frozen=True)
class UninstallReport:
    """What uninstall removed: the folder, state entries and approvals."""

    plugin_id: str
    folder: Path | None
    was_loaded: bool
    state_entries: int
    approvals: int


def find_folder(dirs: list[tuple[str, Path]], plugin_id: str) -> Path | None:
    """The folder of `plugin_id` under the plugin directories (the first, by precedence).

    A folder whose plugin.toml no longer parses is still the plugin's when it is named
    after it (as `install` names it) or its manifest still says `id = "<plugin_id>"`:
    an operator must be able to remove a plugin that is broken."""
    found = _find(dirs, plugin_id)
    return found.folder if found is not None else None


def _find(dirs: list[tuple[str, Path]], plugin_id: str) -> Discovered | None:
    found = discover(dirs)
    for entry in found:
        if entry.manifest is not None and entry.manifest.id == plugin_id:
            return entry
    # A broken package's folder is pip's, never a folder to remove by its name.
    broken = [e for e in found if e.manifest is None and e.source != PACKAGES[0]]
    return next((e for e in broken if e.folder.name == plugin_id), None) or next(
        (e for e in broken if _declares_id(e.folder / "plugin.toml", plugin_id)), None)


_ID_LINE = re.compile(r"""^[ \t]*id[ \t]*=[ \t]*["']([^"'\n]{1,64})["'][ \t]*(?:#.*)?$""",
                      re.MULTILINE)
_READ_CAP = 64 * 1024


def _declares_id(manifest: Path, plugin_id: str) -> bool:
    """Whether an unparsable plugin.toml still has the line `id = "<plugin_id>"`."""
    try:
        if not manifest.is_file() or manifest.is_symlink():
            return False
        with manifest.open("rb") as f:
            text = f.read(_READ_CAP).decode("utf-8", errors="replace")
    except OSError:
        return False
    match = _ID_LINE.search(text)
    return match is not None and match.group(1) == plugin_id


def uninstall(host: Host, plugin_id: str, *, purge_state: bool = False) -> UninstallReport:
    """Unload a plugin, remove its folder and revoke its approvals (pip-installed ones refused)."""
    found = _find(host.plugin_dirs, plugin_id)
    if found is not None and found.source == PACKAGES[0]:
        # Its files belong to pip: removing them here would break the package.
        raise ConfigError(f"plugin {plugin_id} comes from an installed Python package: "
                          "pip uninstall that package", plugin_id=plugin_id)
    folder = found.folder if found is not None else None
    was_loaded = host.unload(plugin_id)  # counts the unregister when it was loaded
    if folder is None and not was_loaded:
        raise NotInstalled(f"plugin {plugin_id} is not installed in "
                          f"{', '.join(str(d) for _, d in host.plugin_dirs) or 'any folder'}",
                          plugin_id=plugin_id)
    if folder is not None:
        doomed = folder.parent / f".wxb-removed-{plugin_id}-{uuid.uuid4().hex[:8]}"
        os.rename(folder, doomed)
        fsync_dir(folder.parent)
        shutil.rmtree(doomed, ignore_errors=True)
    if not was_loaded:
        host.observe.metrics.record_registration("unregister", plugin_id)
    entries = host.state_store().drop_plugin(plugin_id) if purge_state else 0
    approvals = ApprovalStore.in_data_dir(host.config.data_dir).revoke(plugin_id)
    log.info("plugin %s uninstalled: folder %s, %d state entries purged, %d approvals revoked",
             plugin_id, folder or "-", entries, approvals,
             extra={"plugin_id": plugin_id})
    return UninstallReport(plugin_id, folder, was_loaded, entries, approvals)
