"""Rescan and hot reload: the host follows its plugin folders and enable state.

`rescan(host)` reads the enable state again (another process may have run
`wasmext enable/disable`), discovers the plugin folders again and:

- loads a folder that is new, or newly enabled;
- unloads a plugin whose folder went away or that was disabled (its tools,
  event subscriptions and its own MCP servers go with it);
- keeps a plugin serving while its folder is there but unreadable (a
  plugin.toml being edited, say), reporting the error;
- reloads a plugin whose module or plugin.toml changed. The new plugin gets a
  new instance pool and is swapped in with one assignment: a call that started
  on the old one finishes on it, a call that starts after the swap runs the new
  one, so no call sees half of a reload. Grants are checked again against the
  new digest (config grants and recorded approvals both name a digest). A
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
from typing import TYPE_CHECKING

from wasmext.config import EnableState
from wasmext.discovery import discover
from wasmext.errors import ConfigError, WasmextError
from wasmext.manifest import Manifest

if TYPE_CHECKING:
    from wasmext.host import Host
    from wasmext.services.hostview import LoadedPlugin

__all__ = ["RescanReport", "rescan", "unload"]

log = logging.getLogger("wasmext.reload")
DISCOVERED = ("user", "workspace")
_rescan_lock = threading.Lock()


@dataclass
class RescanReport:
    added: list[str] = field(default_factory=list)
    reloaded: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    errors: list[WasmextError] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.reloaded or self.removed)


def _file_digest(path: Path) -> str | None:
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _changed(lp: LoadedPlugin, manifest: Manifest) -> bool:
    if lp.manifest != manifest:
        return True
    return _file_digest(manifest.wasm_path) != f"sha256:{lp.plugin.module.info.digest}"


def _owner(host: Host, name: str) -> str | None:
    """The loaded plugin whose MCP server `name` is (as `Host.start_mcp` decides: a
    configured server's name is never a plugin's; else the first granted asker)."""
    if any(s.name == name for s in host.config.mcp_servers):
        return None
    for lp in list(host.plugins.values()):
        declared = lp.manifest.mcp_servers if lp.manifest else ()
        if any(s.name == name for s in declared) and f"mcp-server:{name}" in lp.plugin.grants:
            return lp.id
    return None


def _owned(host: Host, lp: LoadedPlugin) -> list[str]:
    return [s.name for s in (lp.manifest.mcp_servers if lp.manifest else ())
            if _owner(host, s.name) == lp.id]


def stop_servers(host: Host, names: list[str]) -> None:
    """Stop a plugin's own MCP servers; their tools leave the registry."""
    for name in names:
        if host.mcp is not None:
            host.mcp.stop_server(name)
        host.tools.drop_owner(f"mcp:{name}")
        host.tools.release(f"mcp:{name}")


def start_plugin_servers(host: Host, lp: LoadedPlugin) -> None:
    """Start a plugin's own MCP servers when the host's MCP clients are running."""
    if host.mcp is None or lp.manifest is None or not host.config.mcp_enabled:
        return
    from wasmext.mcp.client import ServerSpec

    specs = []
    for server in lp.manifest.mcp_servers:
        problem = None
        if f"mcp-server:{server.name}" not in lp.plugin.grants:
            problem = (f"plugin {lp.id} asks for MCP server {server.name!r} without the grant "
                       f"'mcp-server:{server.name}'")
        elif _owner(host, server.name) != lp.id:
            problem = f"plugin {lp.id}: MCP server name {server.name!r} is taken"
        else:
            try:
                host.tools.claim(server.name, f"mcp:{server.name}")
                specs.append(ServerSpec.from_config(server))
            except ConfigError as err:
                problem = f"plugin {lp.id}: MCP server {server.name!r}: {err.message}"
        if problem is not None:
            host.load_errors.append(ConfigError(problem, plugin_id=lp.id))
    try:
        if specs:
            host.mcp.start(specs)
    except ConfigError as err:  # still running from before: keep it
        host.load_errors.append(ConfigError(f"plugin {lp.id}: {err.message}", plugin_id=lp.id))


def unload(host: Host, plugin_id: str) -> bool:
    """Unload a plugin now: hooks, tools, subscriptions and its own MCP servers."""
    with host._lock:
        lp = host.plugins.get(plugin_id)
        servers = _owned(host, lp) if lp is not None else []
        host.plugins.pop(plugin_id, None)
        if lp is not None:
            lp.plugin.close()  # idle instances go; running calls finish on theirs
            if host.runtime.plugins.get(plugin_id) is lp.plugin:
                del host.runtime.plugins[plugin_id]  # and its compiled module with it
        host._order_cache.clear()
    if lp is None:
        return False
    host.tools.drop_owner(f"plugin:{plugin_id}")
    host.tools.release(f"plugin:{plugin_id}")
    stop_servers(host, servers)
    host.observe.unloaded(plugin_id)
    log.info("plugin %s unloaded", plugin_id)
    return True


def rescan(host: Host) -> RescanReport:
    """Bring the loaded plugins in line with the folders and the enable state."""
    report = RescanReport()
    with _rescan_lock:
        host.enable_state = EnableState(host.config)  # read again: another process may write
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
                unload(host, pid)
                report.removed.append(pid)
        for pid, (folder, manifest, source) in wanted.items():
            old = host.plugins.get(pid)
            if old is not None and (old.source not in DISCOVERED or not _changed(old, manifest)):
                continue
            before = len(host.load_errors)
            if old is not None:
                stop_servers(host, _owned(host, old))
            host._load_folder(folder, manifest, source, replace=old is not None)
            new = host.plugins.get(pid)
            report.errors.extend(host.load_errors[before:])
            if new is None or new is old:
                if old is not None:
                    start_plugin_servers(host, old)  # the old one keeps serving
                continue
            (report.reloaded if old is not None else report.added).append(pid)
            start_plugin_servers(host, new)
        del host.load_errors[:-1000]
    if report.changed:
        log.info("rescan: added %s, reloaded %s, removed %s", report.added or "-",
                 report.reloaded or "-", report.removed or "-")
    return report
