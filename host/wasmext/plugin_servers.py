"""A plugin's own MCP servers: who owns a server name, what environment it starts
with, and starting and stopping them beside the configured servers.

`Host` inherits these methods; they read the host's config, plugins, tool registry
and MCP clients, and add every refusal to its `load_errors`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext.config import HostConfig
from wasmext.errors import ConfigError, WasmextError
from wasmext.services.hostview import LoadedPlugin
from wasmext.services.tools import ToolRegistry

if TYPE_CHECKING:
    from wasmext.mcp.client.connections import McpClients
    from wasmext.mcp.client.spec import ServerSpec

__all__ = ["PluginServers"]


class PluginServers:
    """The MCP clients of a host: the configured servers and those plugins bring."""

    config: HostConfig
    plugins: dict[str, LoadedPlugin]
    tools: ToolRegistry
    mcp: McpClients | None
    load_errors: list[WasmextError]

    def start_mcp(self, sampler: Callable[[str, Any], Any] | None = None
                  ) -> McpClients | None:
        """Connect the configured MCP servers and those plugins bring under their
        grants; their tools join `self.tools`. `sampler`: the app's model for
        configured servers with `sampling = true` (wasmext.mcp.client.callbacks), never
        for a plugin's own."""
        from wasmext.mcp.client.connections import McpClients  # the SDK loads when used
        from wasmext.mcp.client.spec import ServerSpec

        specs = [ServerSpec.from_config(c) for c in self.config.mcp_servers]
        for lp in list(self.plugins.values()):
            specs.extend(self._plugin_server_specs(lp))
        if not self.config.mcp_enabled or not specs or self.mcp is not None:
            return self.mcp
        self.mcp = McpClients(self.tools)
        self.mcp.sampler = sampler
        self.mcp.oauth_dir = Path(self.config.data_dir) / "mcp-oauth"
        self.mcp.start(specs)
        return self.mcp

    def mcp_server_claimants(self, name: str) -> list[str]:
        """The loaded plugins whose manifest asks for MCP server `name` and that are
        granted it (`mcp-server:NAME`), sorted by id."""
        return sorted(lp.id for lp in list(self.plugins.values())
                      if f"mcp-server:{name}" in lp.plugin.grants and lp.manifest is not None
                      and any(s.name == name for s in lp.manifest.mcp_servers))

    def mcp_server_owner(self, name: str) -> str | None:
        """The loaded plugin whose own MCP server `name` is: the one plugin granted it
        that asks for it. None when a configured server has the name (never a
        plugin's), and when two or more plugins are granted it: contested, it is run by
        none of them, whatever order they loaded in."""
        if any(s.name == name for s in self.config.mcp_servers):
            return None
        claimants = self.mcp_server_claimants(name)
        return claimants[0] if len(claimants) == 1 else None

    def _owned_servers(self, lp: LoadedPlugin) -> list[str]:
        return [s.name for s in (lp.manifest.mcp_servers if lp.manifest else ())
                if self.mcp_server_owner(s.name) == lp.id]

    def _plugin_server_specs(self, lp: LoadedPlugin,
                             only: frozenset[str] | None = None) -> list[ServerSpec]:
        """`lp`'s own MCP servers (those named in `only`, if given) that it may run
        (granted, name its alone), their names claimed in the tool registry; each
        refusal goes to `load_errors`."""
        from wasmext.mcp.client.spec import ServerSpec

        specs = []
        for server in lp.manifest.mcp_servers if lp.manifest else ():
            if only is not None and server.name not in only:
                continue
            problem = None
            claimants = self.mcp_server_claimants(server.name)
            if f"mcp-server:{server.name}" not in lp.plugin.grants:
                problem = (f"plugin {lp.id} asks for MCP server {server.name!r} without the "
                           f"grant 'mcp-server:{server.name}' (to run it: wasmext grant "
                           f"{lp.id} mcp-server:{server.name})")
            elif self.mcp_server_owner(server.name) != lp.id and len(claimants) > 1:
                problem = (f"plugin {lp.id}: MCP server {server.name!r} is granted to the "
                           f"plugins {', '.join(claimants)}, so none of them runs it "
                           f"(keep the grant for one of them: for each other, wasmext "
                           f"revoke ID mcp-server:{server.name} or drop it from "
                           f"[grants.ID])")
            elif self.mcp_server_owner(server.name) != lp.id:
                problem = f"plugin {lp.id}: MCP server name {server.name!r} is taken"
            else:
                try:
                    self.tools.claim(server.name, f"mcp:{server.name}")
                    # Never the host's whole environment (every host secret): only what
                    # the operator allowed this plugin, its settings, and the table's env.
                    spec = ServerSpec.from_config(server)
                    # Nor the application's model: a server asking it to sample would
                    # spend it outside every llm grant, allowlist and token budget.
                    specs.append(dataclasses.replace(
                        spec, inherit_env=False, sampling=False,
                        env={**self._plugin_server_env(lp), **spec.env}))
                except ConfigError as err:
                    problem = f"plugin {lp.id}: MCP server {server.name!r}: {err.message}"
            if problem is not None:
                self.load_errors.append(ConfigError(problem, plugin_id=lp.id))
        return specs

    def _plugin_server_env(self, lp: LoadedPlugin) -> dict[str, str]:
        """The environment a plugin's own MCP servers start with (beside the SDK's minimal
        PATH, HOME, ...): the variables `[plugin.ID] env` names, never a host credential,
        then each setting as `WASMEXT_SETTING_<NAME>` and under its declared `env` name."""
        over = self.config.overrides.get(lp.id)
        denied = self.config.credential_env | {self.config.llm.api_key_env}
        env = {var: os.environ[var] for var in sorted(over.env if over else ())
               if var not in denied and var in os.environ}
        declared = {s.name: s.env for s in (lp.manifest.settings if lp.manifest else ())}
        for name, value in lp.plugin.settings.items():
            if value is None:
                continue
            text = value if isinstance(value, str) else json.dumps(value)
            if "\x00" in text:  # no process environment can hold it
                continue
            env["WASMEXT_SETTING_" + re.sub(r"[^A-Z0-9_]", "_", name.upper())] = text
            if declared.get(name) and declared[name] not in denied:
                env[str(declared[name])] = text
        return env

    def start_plugin_servers(self, lp: LoadedPlugin) -> None:
        """Start a plugin's own MCP servers when the host's MCP clients are running.
        A server name it makes contested (another plugin granted it too) stops: what
        runs is what a fresh start with these plugins would run."""
        if self.mcp is None or lp.manifest is None or not self.config.mcp_enabled:
            return
        configured = {c.name for c in self.config.mcp_servers}
        self._stop_servers([s.name for s in lp.manifest.mcp_servers if s.name not in configured
                            and len(self.mcp_server_claimants(s.name)) > 1])
        specs = self._plugin_server_specs(lp)
        try:
            if specs:
                self.mcp.start(specs)
        except ConfigError as err:  # still running from before: keep it
            self.load_errors.append(ConfigError(f"plugin {lp.id}: {err.message}",
                                                plugin_id=lp.id))

    def stop_plugin_servers(self, lp: LoadedPlugin) -> None:
        """Stop a plugin's own MCP servers; their tools leave the registry."""
        self._stop_servers(self._owned_servers(lp))

    def start_released_servers(self, gone: LoadedPlugin) -> None:
        """After `gone` was unloaded (or replaced by a reload): each server name it asked
        for that another plugin alone is granted now is that plugin's, and starts unless
        it runs already (what a fresh start with the plugins loaded now would run)."""
        if self.mcp is None or gone.manifest is None or not self.config.mcp_enabled:
            return
        running = {known["name"] for known in self.mcp.servers()}
        for server in gone.manifest.mcp_servers:
            owner = self.mcp_server_owner(server.name)
            lp = self.plugins.get(owner) if owner is not None else None
            # Its own new version's servers are `start_plugin_servers`'s to start.
            if lp is None or owner == gone.id or server.name in running:
                continue
            specs = self._plugin_server_specs(lp, only=frozenset({server.name}))
            try:
                if specs:
                    self.mcp.start(specs)
            except ConfigError as err:  # already running: keep it
                self.load_errors.append(ConfigError(f"plugin {lp.id}: {err.message}",
                                                    plugin_id=lp.id))

    def _stop_servers(self, names: list[str]) -> None:
        for name in names:
            if self.mcp is not None:
                self.mcp.stop_server(name)
            self.tools.drop_owner(f"mcp:{name}")
            self.tools.release(f"mcp:{name}")
