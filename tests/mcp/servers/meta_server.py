"""An MCP test server whose tool, resource and prompt answer the `_meta` of the request
that asked (stdio): lets a test see the trace context a client sent."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("meta")


@server.tool(description="Answer the request's _meta as JSON.", structured_output=False)
def show_meta(ctx: Context[Any, Any]) -> str:
    meta = ctx.request_context.meta
    return json.dumps(dict(meta) if meta else {})


@server.resource("meta://show/{name}", description="The request's _meta as JSON.")
def show_meta_resource(name: str, ctx: Context[Any, Any]) -> str:
    meta = ctx.request_context.meta
    return json.dumps(dict(meta) if meta else {})


@server.prompt(description="The request's _meta as JSON.")
def show_meta_prompt(ctx: Context[Any, Any]) -> str:
    meta = ctx.request_context.meta
    return json.dumps(dict(meta) if meta else {})


if __name__ == "__main__":
    server.run()
