"""An MCP test server that changes while connected (official Python SDK, stdio):
`grow` adds a tool and announces it (notifications/tools/list_changed), `slow` reports
progress each step, and records in $MCP_CANCEL_FILE when a call of it is cancelled."""

from __future__ import annotations

import os

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("lively")


@server.tool(description="Add a tool named NAME and announce the new list.")
async def grow(name: str, ctx: Context) -> str:
    def added() -> str:
        return f"I am {name}"
    server.add_tool(added, name=name, description=f"Added at run time: {name}")
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool(description="Sleep STEPS times DELAY seconds, reporting progress each step.")
async def slow(steps: int, delay: float, ctx: Context) -> str:
    try:
        for step in range(1, steps + 1):
            await anyio.sleep(delay)
            await ctx.report_progress(step, steps, f"step {step}")
    except anyio.get_cancelled_exc_class():
        if os.environ.get("MCP_CANCEL_FILE"):
            with open(os.environ["MCP_CANCEL_FILE"], "a") as f:
                f.write("cancelled\n")
        raise
    return f"done after {steps} steps"


if __name__ == "__main__":
    server.run()
