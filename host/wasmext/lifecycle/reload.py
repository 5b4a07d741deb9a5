"""Rescan and hot reload: the host follows its plugin folders and enable state.

`rescan(host)` reads the enable state again (another process may have run
`wasmext enable/disable`), discovers the plugin folders again and:

- loads a folder that is new, or newly enabled;
- unloads a plugin whose folder went away or that was disabled (its tools,
  event subscriptions and its own MCP servers go with it);
- keeps a plugin serving while its folder is there but unreadable (a
  plugin.toml being edited, say), reporting the error;
- reloads a plugin whose grants changed (an operator ran `wasmext grant` or
  `revoke`, or the config's [grants.ID] changed): a discovered plugin holds
  exactly what the config and the recorded approvals grant it, so the new
  grants take effect without a restart (the watcher sees approvals.json);
- reloads a plugin whose module or plugin.toml changed. The new plugin gets a
  new instance pool and is swapped in with one assignment: a call that started
  on the old one finishes on it, a call that starts after the swap runs the new
  one, so no call sees half of a reload. Grants are checked again against the
  new digest (config grants and recorded approvals both name a digest); so is
  one whose MCP server script (a file its manifest makes the host run) changed. A
  folder that no longer loads keeps the old plugin serving; the error is
  reported.

Plugins added by code (`Host.add` with bytes or a path outside the plugin
directories) are left alone. Tool listings follow at once (the MCP server
notices the changed catalog and sends `tools/list_changed`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from wasmext.config import EnableState
from wasmext.discovery import discover
from wasmext.errors import ConfigError, WasmextError
from wasmext.files import read_regular
from wasmext.lifecycle.approvals import executed_files
from wasmext.manifest import Manifest
from wasmext.services.hostview import LoadedPlugin

__all__ = ["RescanReport", "Rescannable", "rescan"]

log = logging.getLogger("wasmext.reload")
DISCOVERED = ("user", "workspace", "package")
# Only to tell whether a module changed; the loader holds it to the runtime's own caps.
MAX_MODULE_FILE = 2**30
_rescan_lock = threading.Lock()


class Rescannable(Protocol):
    """What rescan needs of a host (`wasmext.host.Host` is one)."""

    plugins: dict[str, LoadedPlugin]
    plugin_dirs: list[tuple[str, Path]]
    load_errors: list[WasmextError]
    enable_state: EnableState

    def read_enable_state(self) -> None:
        """Read the enable state again (another process may have written it)."""
        ...
    def unload(self, plugin_id: str) -> bool:
        """Unload a plugin now; True if it was loaded."""
        ...
    def load_folder(self, folder: Path, manifest: Manifest, source: str,
                    replace: bool = False) -> None:
        """Load a discovered plugin folder unless disabled."""
        ...
    def approved_now(self, lp: LoadedPlugin) -> frozenset[str]:
        """What the config's grants and the recorded approvals grant the plugin now."""
        ...
    def start_plugin_servers(self, lp: LoadedPlugin) -> None:
        """Start a plugin's own MCP servers when the host's MCP clients are running."""
        ...
    def stop_plugin_servers(self, lp: LoadedPlugin) -> None:
        """Stop a plugin's own MCP servers; their tools leave the registry."""
        ...
    def start_released_servers(self, gone: LoadedPlugin) -> None:
        """Start the servers `gone` contested that another plugin alone is granted now."""
        ...


@dataclass
class RescanReport:
    """What one rescan changed, and the folders it could not load."""

    added: list[str] = field(default_factory=list)
    reloaded: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: list[WasmextError] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True if any plugin was added, reloaded or removed."""
        return bool(self.added or self.reloaded or self.removed)


def _file_digest(path: Path) -> str | None:
    try:
        return "sha256:" + hashlib.sha256(read_regular(path, MAX_MODULE_FILE)).hexdigest()
    except OSError:
        return None


def _changed(lp: LoadedPlugin, manifest: Manifest) -> bool:
    # By the bytes: the loaded manifest has its MCP servers' variables resolved.
    if lp.manifest is None or lp.manifest.path != manifest.path or \
            lp.manifest.source_digest != manifest.source_digest:
        return True
    if _file_digest(manifest.wasm_path) != f"sha256:{lp.plugin.module.info.digest}":
        return True
    # A file it makes the host run changed: load it again, its grants checked again.
    return bool(lp.executed) and executed_files(lp.manifest) != lp.executed


def rescan(host: Rescannable) -> RescanReport:
    """Bring the loaded plugins in line with the folders and the enable state."""
    report = RescanReport()
    with _rescan_lock:
        try:
            host.read_enable_state()
        except ConfigError as err:  # plugins.json is no file now: keep the choices read before
            report.errors.append(err)
        wanted: dict[str, tuple[Path, Manifest, str]] = {}
        broken: set[Path] = set()  # folders there but unreadable: what runs keeps running
        for found in discover(host.plugin_dirs):
            if found.error is not None:
                report.errors.append(found.error)
                broken.add(found.folder)
            elif found.manifest is not None and host.enable_state.is_enabled(found.manifest.id):
                wanted[found.manifest.id] = (found.folder, found.manifest, found.source)
        for pid, lp in list(host.plugins.items()):
            if lp.source in DISCOVERED and pid not in wanted and \
                    (lp.manifest is None or lp.manifest.path.parent not in broken):
                host.unload(pid)
                report.removed.append(pid)
        for pid, (folder, manifest, source) in wanted.items():
            old = host.plugins.get(pid)
            if old is not None and (old.source not in DISCOVERED or (
                    not _changed(old, manifest)
                    and host.approved_now(old) == old.plugin.grants)):
                continue
            before = len(host.load_errors)
            if old is not None:
                host.stop_plugin_servers(old)
            host.load_folder(folder, manifest, source, replace=old is not None)
            new = host.plugins.get(pid)
            report.errors.extend(host.load_errors[before:])
            if new is None or new is old:
                if old is not None:
                    host.start_plugin_servers(old)  # the old one keeps serving
                continue
            (report.reloaded if old is not None else report.added).append(pid)
            host.start_plugin_servers(new)
            if old is not None:  # a reload that dropped its grant frees a contested name
                host.start_released_servers(old)
        del host.load_errors[:-1000]
    if report.changed:
        log.info("rescan: added %s, reloaded %s, removed %s", report.added or "-",
                 report.reloaded or "-", report.removed or "-")
    return report
