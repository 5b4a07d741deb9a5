"""An MCP test server: add, echo and fail (stdio; --http PORT or --sse PORT)."""

from __future__ import annotations

import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

if os.environ.get("MCP_PID_FILE"):  # lets the tests see the process end
    with open(os.environ["MCP_PID_FILE"], "a") as f:
        f.write(f"{os.getpid()}\n")

server = MCPServer("calc")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Echo the text back.", structured_output=False)
def echo(text: str) -> str:
    return text


@server.tool(description="Always fails.")
def fail(why: str) -> str:
    raise ToolError(f"failed because {why}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "--sse":
        server.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
