"""An MCP test server that tells which environment variables it was started with."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("env")


@server.tool(description="The value of an environment variable, or <unset>.",
             structured_output=False)
def env(name: str) -> str:
    return os.environ.get(name, "<unset>")


if __name__ == "__main__":
    server.run()
