"""The Model Context Protocol, both ways, with the official `mcp` SDK.

Leaves: `config` (`[mcp]` tables, read by the host's config and manifests),
`envsubst` (`${VAR}` in server tables), `content` (MCP blocks <-> MessagePack
shapes). Packages: `client` (configured servers' tools in the host's tool
registry: a service), `oauth` (authorizing those connections), `server`
(`wasmext mcp serve`: a bridge that imports the host). Nothing imports `server`
eagerly, so the SDK's server side loads only for `wasmext mcp serve`.
"""
