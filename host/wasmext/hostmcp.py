"""Wiring a host's MCP clients: the configured servers, then those its plugins
bring, each only under the plugin's `mcp-server:<name>` grant and a free name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext.errors import ConfigError

if TYPE_CHECKING:
    from wasmext.host import Host
    from wasmext.mcp.client import McpClients


def start_mcp(host: Host, sampler: Callable[[str, Any], Any] | None = None
              ) -> McpClients | None:
    from wasmext.mcp.client import McpClients, ServerSpec  # the SDK loads only when used

    wanted = list(host.config.mcp_servers)
    for lp in host.plugins.values():
        for server in lp.manifest.mcp_servers if lp.manifest else ():
            if f"mcp-server:{server.name}" not in lp.plugin.grants:
                host.load_errors.append(ConfigError(
                    f"plugin {lp.id} asks for MCP server {server.name!r} without the grant "
                    f"'mcp-server:{server.name}'", plugin_id=lp.id))
            elif any(w.name == server.name for w in wanted):
                host.load_errors.append(ConfigError(
                    f"plugin {lp.id}: MCP server name {server.name!r} is taken",
                    plugin_id=lp.id))
            else:
                try:
                    host.tools.claim(server.name, f"mcp:{server.name}")
                except ConfigError as err:
                    host.load_errors.append(ConfigError(
                        f"plugin {lp.id}: MCP server {server.name!r}: {err.message}",
                        plugin_id=lp.id))
                    continue
                wanted.append(server)
    specs = [ServerSpec.from_config(c) for c in wanted]
    if not host.config.mcp_enabled or not specs or host.mcp is not None:
        return host.mcp
    host.mcp = McpClients(host.tools)
    host.mcp.sampler = sampler
    host.mcp.oauth_dir = Path(host.config.data_dir) / "mcp-oauth"
    host.mcp.start(specs)
    return host.mcp

