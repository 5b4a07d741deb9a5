"""MCP server side: `wasmext mcp serve` offers a Host's tools, resources and prompts.

`serve` (the SDK server over stdio or streamable HTTP) · `catalog` (what is
served, shaped and cleaned) · `handlers` (resources/* and prompts/*) ·
`changes` (list_changed notifications) · `upstream` (configured servers'
resources and prompts served again) · `results` (tool results and errors) ·
`auth` (bearer tokens, Host/Origin checks for HTTP). A bridge: the one part of
the package that imports the host.
"""
