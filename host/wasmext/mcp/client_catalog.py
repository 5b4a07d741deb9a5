"""Configured MCP servers' resources and prompts, for the app and for plugins.

    resources = list_resources(host.mcp, "docs")        # [{uri, name, mime_type?, ...}]
    blocks = read_resource(host.mcp, "docs", uri)       # [resource block] (see `content`)
    prompts = list_prompts(host.mcp, "docs")            # [{name, description?, arguments}]
    got = get_prompt(host.mcp, "docs", "review", {"code": "..."})  # {description?, messages}

Plain maps in the MessagePack shape of `wasmext.mcp.content` (binary as bytes);
the plugin ops `resource.list|read` and `prompt.list|get` answer the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wasmext.mcp.content import MAX_BLOCKS, from_mcp, resource_contents

if TYPE_CHECKING:
    from wasmext.mcp.client import McpClients

__all__ = ["get_prompt", "list_prompts", "list_resources", "read_resource"]

MAX_LISTED = 1000


def _optional(item: Any, *keys: str) -> dict[str, Any]:
    return {k: getattr(item, k) for k in keys if getattr(item, k, None) is not None}


def list_resources(clients: McpClients, server: str) -> list[dict[str, Any]]:
    listed = clients.request(server, lambda s: s.list_resources())
    return [{"uri": str(r.uri), "name": r.name, **_optional(r, "mime_type", "description",
                                                            "title")}
            for r in listed.resources[:MAX_LISTED]]


def read_resource(clients: McpClients, server: str, uri: str) -> list[dict[str, Any]]:
    read = clients.request(server, lambda s: s.read_resource(uri))
    return [resource_contents(c) for c in read.contents[:MAX_BLOCKS]]


def list_prompts(clients: McpClients, server: str) -> list[dict[str, Any]]:
    listed = clients.request(server, lambda s: s.list_prompts())
    return [{"name": p.name, **_optional(p, "description", "title"),
             "arguments": [{"name": a.name, "required": bool(a.required),
                            **_optional(a, "description")} for a in (p.arguments or [])]}
            for p in listed.prompts[:MAX_LISTED]]


def get_prompt(clients: McpClients, server: str, name: str,
               args: dict[str, str] | None = None) -> dict[str, Any]:
    got = clients.request(server, lambda s: s.get_prompt(name, dict(args or {})))
    out: dict[str, Any] = {"messages": [{"role": m.role, "content": from_mcp([m.content])[0]}
                                        for m in got.messages[:MAX_BLOCKS]
                                        if from_mcp([m.content])]}
    if got.description is not None:
        out["description"] = got.description
    return out
