"""Authorizing ahead of time: `wasmext mcp login NAME` and `wasmext mcp logout NAME`.

A server with an `[mcp.servers.NAME.oauth]` table is otherwise authorized at its
first connection, which may be a service starting with nobody at the terminal.
`login` runs the same flow now (the same request `transport_http.check_access`
makes, so the same provider, prompt, bounds and cleaning) and leaves the tokens
where every later connection looks: data_dir/mcp-oauth/NAME.json. `logout`
removes that file (the next connection authorizes again).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from wasmext.errors import ConfigError, McpAuthError
from wasmext.mcp.oauth.store import FileTokenStorage, token_path

if TYPE_CHECKING:
    from wasmext.config import HostConfig
    from wasmext.mcp.client.spec import ServerSpec
    from wasmext.mcp.oauth.provider import Prompt

__all__ = ["login", "logout", "oauth_folder", "oauth_spec"]


def oauth_folder(config: HostConfig) -> Path:
    """The data dir's folder of MCP OAuth tokens."""
    return Path(config.data_dir) / "mcp-oauth"


def oauth_spec(config: HostConfig, name: str) -> ServerSpec:
    """The configured server `name`, which must have an oauth table (ConfigError if not)."""
    from wasmext.mcp.client.spec import ServerSpec

    for server in config.mcp_servers:
        if server.name == name:
            spec = ServerSpec.from_config(server)
            if spec.oauth is None:
                raise ConfigError(f"mcp server {name!r} has no [mcp.servers.{name}.oauth] "
                                  "table: nothing to log in to")
            return spec
    known = ", ".join(sorted(s.name for s in config.mcp_servers)) or "none"
    raise ConfigError(f"no mcp server {name[:64]!r} in the config (configured: {known})")


def login(spec: ServerSpec, folder: Path, prompt: Prompt | None = None) -> Path:
    """Authorize wasmext at `spec`'s server now; the token file's path.

    McpAuthError when the server still refuses, the flow fails, or nobody authorizes
    in time; the server's words are cleaned as on any connection."""
    from mcp.shared._httpx_utils import create_mcp_http_client

    from wasmext.mcp.client.transport import check_access
    from wasmext.mcp.oauth.provider import build_auth

    auth = build_auth(spec, folder, prompt)

    async def run() -> None:
        async with create_mcp_http_client(headers=dict(spec.headers) or None,
                                          auth=auth) as http:
            await check_access(http, spec)

    anyio.run(run)
    stored = token_path(folder, spec.name)
    tokens, _client = FileTokenStorage(stored, str(spec.url), spec.name)._read()
    if tokens is None:
        raise McpAuthError(f"mcp server {spec.name}: the server let wasmext in without "
                           "OAuth, so no token was stored")
    return stored


def logout(folder: Path, name: str) -> bool:
    """Forget `name`'s tokens and client registration; False when none were stored."""
    try:
        token_path(folder, name).unlink()
    except FileNotFoundError:
        return False
    return True
