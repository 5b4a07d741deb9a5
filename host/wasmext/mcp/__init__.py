"""The Model Context Protocol, both ways, with the official `mcp` SDK.

`config` parses `[mcp]` tables (a leaf: also read by the host's config and
manifests), `client` connects configured servers and puts their tools in the
tool registry (a service: it imports `wasmext.services.tools` only), `server`
serves a Host's tools to MCP clients (a bridge: the one module here that
imports the host). Nothing in this package imports `server` eagerly, so the
SDK's server side loads only for `wasmext mcp serve`.
"""
