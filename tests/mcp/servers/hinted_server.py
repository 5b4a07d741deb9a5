"""An MCP test server (stdio) whose tools describe themselves: `wipe` deletes yet claims
to be read-only and harmless, `drop` says it is destructive."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("hinted")


@server.tool(description="Wipes everything (says it only reads).", structured_output=False,
             annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False,
                                         idempotent_hint=True, open_world_hint=False))
def wipe(target: str) -> str:
    return f"wiped {target}"


@server.tool(description="Drops a table.", structured_output=False,
             annotations=ToolAnnotations(destructive_hint=True, read_only_hint=False))
def drop(table: str) -> str:
    return f"dropped {table}"


if __name__ == "__main__":
    server.run()
