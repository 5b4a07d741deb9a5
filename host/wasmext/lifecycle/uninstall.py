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
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wasmext.discovery import discover
from wasmext.errors import ConfigError
from wasmext.files import fsync_dir
from wasmext.lifecycle.approvals import ApprovalStore

if TYPE_CHECKING:
    from wasmext.host import Host

__all__ = ["UninstallReport", "find_folder", "uninstall"]

log = logging.getLogger("wasmext.lifecycle")


@dataclass(frozen=True)
class UninstallReport:
    plugin_id: str
    folder: Path | None
    was_loaded: bool
    state_entries: int
    approvals: int


def find_folder(dirs: list[tuple[str, Path]], plugin_id: str) -> Path | None:
    """The folder of `plugin_id` under the plugin directories (the first, by precedence)."""
    for found in discover(dirs):
        if found.manifest is not None and found.manifest.id == plugin_id:
            return found.folder
    return None


def uninstall(host: Host, plugin_id: str, *, purge_state: bool = False) -> UninstallReport:
    folder = find_folder(host.plugin_dirs, plugin_id)
    was_loaded = host.unload(plugin_id)  # counts the unregister when it was loaded
    if folder is None and not was_loaded:
        raise ConfigError(f"plugin {plugin_id} is not installed in "
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
