"""An MCP test server whose `hang` tool never answers."""

from __future__ import annotations

import os

import anyio
from mcp.server.mcpserver import MCPServer

if os.environ.get("MCP_PID_FILE"):  # lets the tests see the process end
    with open(os.environ["MCP_PID_FILE"], "a") as f:
        f.write(f"{os.getpid()}\n")

server = MCPServer("hang")


@server.tool(description="Sleeps forever.")
async def hang() -> str:
    await anyio.sleep_forever()
    return "never"


@server.tool(description="Answers ok.")
def ping() -> str:
    return "pong"


if __name__ == "__main__":
    server.run()
