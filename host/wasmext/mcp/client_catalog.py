"""Configured MCP servers' resources and prompts, for the app and for plugins.

    resources = list_resources(host.mcp, "docs")        # [{uri, name, mime_type?, ...}]
    templates = list_resource_templates(host.mcp, "docs")  # [{uri_template, name, ...}]
    blocks = read_resource(host.mcp, "docs", uri)       # [resource block] (see `content`)
    prompts = list_prompts(host.mcp, "docs")            # [{name, description?, arguments}]
    got = get_prompt(host.mcp, "docs", "review", {"code": "..."})  # {description?, messages}

Plain maps in the MessagePack shape of `wasmext.mcp.content` (binary as bytes);
the plugin ops `resource.list|read` and `prompt.list|get` answer the same. The
lists follow the servers' list_changed notifications (`client_lists`):
`clients.catalog.subscribe(fn)` hears `fn(server, "resources" | "prompts")`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wasmext.mcp.client_lists import TEMPLATES
from wasmext.mcp.content import MAX_BLOCKS, from_mcp, resource_contents

if TYPE_CHECKING:
    from wasmext.mcp.client import McpClients

__all__ = ["get_prompt", "list_prompts", "list_resource_templates", "list_resources",
           "read_resource"]


def list_resources(clients: McpClients, server: str) -> list[dict[str, Any]]:
    """Kept while the server announces its list changes (`client_lists`), else fresh."""
    return clients.catalog.listed(server, "resources")


def list_resource_templates(clients: McpClients, server: str) -> list[dict[str, Any]]:
    """The server's URI templates (RFC 6570); a URI one fits is read with read_resource."""
    return clients.catalog.listed(server, TEMPLATES)


def read_resource(clients: McpClients, server: str, uri: str) -> list[dict[str, Any]]:
    read = clients.request(server, lambda s: s.read_resource(uri))
    return [resource_contents(c) for c in read.contents[:MAX_BLOCKS]]


def list_prompts(clients: McpClients, server: str) -> list[dict[str, Any]]:
    return clients.catalog.listed(server, "prompts")


def get_prompt(clients: McpClients, server: str, name: str,
               args: dict[str, str] | None = None) -> dict[str, Any]:
    got = clients.request(server, lambda s: s.get_prompt(name, dict(args or {})))
    out: dict[str, Any] = {"messages": [{"role": m.role, "content": from_mcp([m.content])[0]}
                                        for m in got.messages[:MAX_BLOCKS]
                                        if from_mcp([m.content])]}
    if got.description is not None:
        out["description"] = got.description
    return out
