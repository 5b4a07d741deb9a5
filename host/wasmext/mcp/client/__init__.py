"""MCP client side: the servers named in the config (or brought by a granted plugin).

`spec` (one checked server) · `connections` (`McpClients`: one event loop thread,
a connection per server, reconnects, their tools in the host's registry) ·
`tools` (listed MCP tools as registry tools, results as registry output) ·
`catalog` (resources, templates and prompts, following list_changed) ·
`callbacks` (what wasmext answers when a server asks: roots, sampling) ·
`transport` (sse/http connections, OAuth) · `plugin_ops` (the guest's `mcp.*`,
`resource.*` and `prompt.*` ops). Nothing here imports the SDK until a
connection is made.
"""
