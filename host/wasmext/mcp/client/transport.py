"""The sse and streamable-HTTP transports of MCP connections, with or without OAuth.

Before the MCP session starts, one GET of the server's URL asks whether it lets
wasmext in. A 401 or 403 is then a named `McpAuthError` instead of the SDK's
"Server returned an error response" after the fact; with an `oauth` table that
same request runs the OAuth flow (see `oauth`), bounded by the time a person may
take to authorize, so the session's connect timeout never has to cover it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from wasmext.errors import McpAuthError
from wasmext.text import without_credentials

if TYPE_CHECKING:
    import httpx2

    from wasmext.mcp.client.spec import ServerSpec
    from wasmext.mcp.oauth.provider import Prompt

__all__ = ["check_access", "http_transport"]


async def check_access(http: httpx2.AsyncClient, spec: ServerSpec,
                       url: str | None = None) -> None:
    """McpAuthError when the server at spec.url answers 401/403 (after OAuth, if any).

    Anything else (a 400 for a GET without a session, an unreachable server, no
    answer in time without OAuth) is left to the MCP transport to report as usual."""
    settings = spec.oauth
    person = settings is not None and settings.grant == "authorization_code"
    limit = spec.connect_timeout_s + (settings.authorize_timeout_s if settings and person
                                      else 0.0)
    status = 0
    try:
        with anyio.fail_after(limit):
            async with http.stream("GET", url or str(spec.url),
                                   headers={"Accept": "text/event-stream"}) as response:
                status = response.status_code
    except TimeoutError:
        if settings is not None:
            raise McpAuthError(f"mcp server {spec.name}: OAuth authorization did not finish "
                               f"within {limit:g} s") from None
    except McpAuthError:
        raise
    except Exception as exc:  # the SDK's OAuth errors; transport errors are the transport's
        if settings is not None and type(exc).__module__.startswith("mcp.client.auth"):
            from wasmext.text import clean

            raise McpAuthError(f"mcp server {spec.name}: OAuth failed: "
                               f"{clean(str(exc) or type(exc).__name__, 300)}") from None
    if status in (401, 403):
        what = "still refuses wasmext after OAuth authorization" if settings else \
            f"asks for authorization: add an [mcp.servers.{spec.name}.oauth] table or headers"
        raise McpAuthError(f"mcp server {spec.name}: HTTP {status}: the server {what}")


@asynccontextmanager
async def http_transport(spec: ServerSpec, oauth_dir: Path, prompt: Prompt | None = None
                         ) -> AsyncIterator[Any]:
    """The (read, write) streams of an sse or http server."""
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    auth = None
    if spec.oauth is not None:
        from wasmext.mcp.oauth.provider import build_auth

        auth = build_auth(spec, oauth_dir, prompt)
    url, basic = without_credentials(str(spec.url))
    headers = dict(spec.headers)
    if basic is not None and not any(k.lower() == "authorization" for k in headers):
        headers["Authorization"] = basic
    async with create_mcp_http_client(headers=headers or None, auth=auth) as http:
        await check_access(http, spec, url)
        if spec.transport == "sse":
            async with sse_client(url, headers=headers or None,
                                  timeout=spec.connect_timeout_s, auth=auth) as streams:
                yield streams
        else:
            async with streamable_http_client(url, http_client=http) as streams:
                yield streams
