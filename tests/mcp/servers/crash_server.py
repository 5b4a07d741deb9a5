"""An MCP test server whose `crash` tool kills its own process mid-call."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

if os.environ.get("MCP_PID_FILE"):  # lets the tests see the process end
    with open(os.environ["MCP_PID_FILE"], "a") as f:
        f.write(f"{os.getpid()}\n")

server = MCPServer("crash")


@server.tool(description="Answers ok.")
def ping() -> str:
    return "pong"


@server.tool(description="Exits the server process in the middle of the call.")
def crash() -> str:
    os._exit(3)


if __name__ == "__main__":
    server.run()
