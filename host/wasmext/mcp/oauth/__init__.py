"""OAuth for sse and http MCP servers, with the official SDK's client.

`config` (the `[mcp.servers.NAME.oauth]` table) · `store` (token files, 0600,
atomic) · `provider` (the SDK's provider, the loopback redirect listener) ·
`login` (`wasmext mcp login`/`logout`: the flow ahead of time).
"""
