"""The configured MCP servers' resources, resource templates and prompts, served again
by `wasmext mcp serve --include-mcp-catalog` (a gateway, like `--include-mcp-tools`
for tools).

Resources and templates keep their URIs and URI templates (a plugin's, or an
earlier server's, wins a clash; a URI that only an upstream template matches is
read from that server); prompts are served as `<server>__<name>`. Everything comes from
`client_lists`, so it is already cleaned, kept while the server announces
changes and followed when it does; a server's change reaches our clients
because `versions()` feeds the served fingerprints (see `served_changes`). A
server failing to list is logged and left out; one failing a read or a get is an
MCP error naming it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR

from wasmext.mcp.client.catalog import TEMPLATES, get_prompt, read_resource
from wasmext.mcp.content import to_mcp_resource
from wasmext.mcp.server.catalog import prompt_result
from wasmext.text import clean

if TYPE_CHECKING:
    from wasmext.host import Host
    from wasmext.mcp.client.connections import McpClients

__all__ = ["UpstreamExport"]

log = logging.getLogger("wasmext.mcp")


class UpstreamExport:
    """`host.mcp`'s servers' resources and prompts as MCP types (blocking: use a thread)."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def _listed(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        clients = self.host.mcp
        if clients is None:
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        for server in clients.catalog.offering(kind):
            try:
                out.extend((server, item) for item in clients.catalog.listed(server, kind))
            except Exception as exc:  # one server down must not hide the others
                log.warning("mcp server %s: listing %s failed: %s", server, kind,
                            clean(str(exc) or type(exc).__name__, 300))
        return out

    def versions(self) -> dict[str, list[tuple[str, int]]]:
        """Per kind, each connected server with its count of followed changes: what
        the fingerprints compare (no I/O; a first listing is not a change)."""
        clients = self.host.mcp
        if clients is None:
            return {}
        return {kind: [(server, clients.catalog.changes(server, kind))
                       for server in clients.catalog.offering(kind)]
                for kind in ("resources", "prompts")}

    def resources(self) -> list[tuple[str, types.Resource]]:
        """The upstream servers' resources, each with its server."""
        return [(server, types.Resource(uri=r["uri"], name=r["name"], title=r.get("title"),
                                        mime_type=r.get("mime_type"),
                                        description=r.get("description")))
                for server, r in self._listed("resources")]

    def templates(self) -> list[tuple[str, types.ResourceTemplate]]:
        """The upstream servers' resource templates, each with its server."""
        return [(server, types.ResourceTemplate(
            uri_template=t["uri_template"], name=t["name"], title=t.get("title"),
            mime_type=t.get("mime_type"), description=t.get("description")))
            for server, t in self._listed(TEMPLATES)]

    def prompts(self) -> list[tuple[str, str, types.Prompt]]:
        """The upstream servers' prompts as (server, name, prompt served as server__name)."""
        return [(server, p["name"], types.Prompt(
            name=f"{server}__{p['name']}", title=p.get("title"),
            description=p.get("description"),
            arguments=[types.PromptArgument(name=a["name"], description=a.get("description"),
                                            required=a["required"])
                       for a in p["arguments"]] or None))
            for server, p in self._listed("prompts")]

    def _clients(self, server: str) -> McpClients:
        if self.host.mcp is None:
            raise MCPError(code=INTERNAL_ERROR, message="no MCP servers are connected")
        return self.host.mcp

    def read(self, server: str, uri: str) -> types.ReadResourceResult:
        """Read a resource of an upstream server; a failure is a cleaned MCPError."""
        try:
            blocks = read_resource(self._clients(server), server, uri)
            return types.ReadResourceResult(contents=[
                to_mcp_resource({k: v for k, v in b.items() if k != "type"},
                                f"mcp server {server}") for b in blocks])
        except MCPError:
            raise
        except Exception as exc:
            raise MCPError(code=INTERNAL_ERROR, message=clean(
                f"mcp server {server}: reading {uri[:200]} failed: {exc}")) from None

    def get(self, server: str, name: str, args: dict[str, str]) -> types.GetPromptResult:
        """Get a prompt of an upstream server; a failure is a cleaned MCPError."""
        try:
            return prompt_result(f"mcp:{server}", get_prompt(self._clients(server), server,
                                                             name, args))
        except MCPError:
            raise
        except Exception as exc:
            raise MCPError(code=INTERNAL_ERROR, message=clean(
                f"mcp server {server}: prompt {name[:80]} failed: {exc}")) from None
