"""Real OAuth-protected MCP servers for the OAuth client tests, run in a thread.

`oauth_mcp(transport)` serves the official SDK's MCPServer (tool `add`) over
streamable HTTP or SSE with the SDK's own authorization server routes
(discovery, dynamic registration, /authorize, /token) in front of a provider that
approves every authorization at once. `client_credentials_mcp()` serves the same
tool behind a small authorization server of ours that grants client credentials
(the SDK's server side has no such grant). Both count what they were asked.
"""

from __future__ import annotations

import secrets
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    TokenVerifier,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from support import free_port as free_port

SCOPE = "tools"


@dataclass
class AutoApprove:
    """An OAuthAuthorizationServerProvider that approves everyone, and counts."""

    expires_in: int = 3600
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    authorizations: int = 0
    refreshes: int = 0
    error: str | None = None  # set: /authorize answers with this error instead

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull,
                        params: AuthorizationParams) -> str:
        self.authorizations += 1
        if self.error is not None:
            return construct_redirect_uri(str(params.redirect_uri), error="access_denied",
                                          error_description=self.error, state=params.state)
        code = secrets.token_urlsafe(16)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [SCOPE], expires_at=time.time() + 300,
            client_id=client.client_id, code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _issue(self, client_id: str, scopes: list[str]) -> OAuthToken:
        token, again = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        self.access[token] = AccessToken(token=token, client_id=client_id, scopes=scopes,
                                         expires_at=int(time.time()) + self.expires_in)
        self.refresh[again] = RefreshToken(token=again, client_id=client_id, scopes=scopes)
        return OAuthToken(access_token=token, expires_in=self.expires_in,
                          scope=" ".join(scopes), refresh_token=again)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        return self._issue(client.client_id, authorization_code.scopes)

    async def load_refresh_token(self, client: OAuthClientInformationFull,
                                 refresh_token: str) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull,
                                     refresh_token: RefreshToken, scopes: list[str]
                                     ) -> OAuthToken:
        self.refreshes += 1
        self.refresh.pop(refresh_token.token, None)
        return self._issue(client.client_id, scopes or refresh_token.scopes)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at or 0) < time.time():
            return None
        return found

    async def revoke_token(self, token: Any) -> None:
        self.access.pop(getattr(token, "token", ""), None)


def _mcp(base: str, path: str, provider: Any = None, verifier: TokenVerifier | None = None,
         issuer: str | None = None) -> MCPServer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # validate_token_resource's deprecation notice
        auth = AuthSettings(
            issuer_url=issuer or base, resource_server_url=f"{base}{path}",
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]),
            required_scopes=[SCOPE], validate_token_resource=False)
    server = MCPServer("guarded", auth_server_provider=provider, token_verifier=verifier,
                       auth=auth)

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b
    return server


@contextmanager
def _serve(app: Any, port: int) -> Iterator[None]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.started
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(10)


@contextmanager
def oauth_mcp(transport: str = "http") -> Iterator[tuple[str, AutoApprove]]:
    """(the MCP url, the provider) of a server behind the SDK's authorization server."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    provider = AutoApprove()
    path = "/mcp" if transport == "http" else "/sse"
    server = _mcp(base, path, provider)
    app = server.streamable_http_app() if transport == "http" else server.sse_app()
    with _serve(app, port):
        yield f"{base}{path}", provider


@dataclass
class Credentials(TokenVerifier):
    """A client-credentials authorization server (and the verifier of its tokens)."""

    client_id: str
    client_secret: str
    issued: dict[str, AccessToken] = field(default_factory=dict)
    grants: int = 0

    async def verify_token(self, token: str) -> AccessToken | None:
        return self.issued.get(token)

    async def metadata(self, request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        return JSONResponse({"issuer": base, "authorization_endpoint": f"{base}/authorize",
                             "token_endpoint": f"{base}/token",
                             "grant_types_supported": ["client_credentials"],
                             "token_endpoint_auth_methods_supported": ["client_secret_basic"]})

    async def token(self, request: Request) -> Response:
        import base64

        form = await request.form()
        basic = request.headers.get("authorization", "").removeprefix("Basic ")
        expected = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        if form.get("grant_type") != "client_credentials" or \
                not secrets.compare_digest(basic, expected):
            return Response("\x1b]8;;http://evil\x07wrong secret\u202e\n" * 50,
                            status_code=401, media_type="text/plain")  # hostile words
        self.grants += 1
        token = secrets.token_urlsafe(16)
        self.issued[token] = AccessToken(token=token, client_id=self.client_id, scopes=[SCOPE])
        return JSONResponse({"access_token": token, "token_type": "Bearer",
                             "expires_in": 3600, "scope": SCOPE})


@contextmanager
def client_credentials_mcp(client_id: str, client_secret: str
                           ) -> Iterator[tuple[str, str, Credentials]]:
    """(the MCP url, the issuer, the authorization server) for client credentials."""
    as_port, port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{as_port}"
    grantor = Credentials(client_id, client_secret)
    as_app = Starlette(routes=[
        Route("/.well-known/oauth-authorization-server", grantor.metadata),
        Route("/token", grantor.token, methods=["POST"])])
    base = f"http://127.0.0.1:{port}"
    server = _mcp(base, "/mcp", verifier=grantor, issuer=issuer)
    with _serve(as_app, as_port), _serve(server.streamable_http_app(), port):
        yield f"{base}/mcp", issuer, grantor


def robot_config(folder: Path, url: str, issuer: str, extra: str = "") -> Path:
    """folder/wasmext.toml: data_dir under `folder` and the server `robot` with client
    credentials from ${ROBOT_ID} and ${ROBOT_SECRET} (then `extra` TOML)."""
    config = folder / "wasmext.toml"
    config.write_text(f"""
[host]
data_dir = "{folder / 'data'}"
[mcp.servers.robot]
transport = "http"
url = "{url}"
[mcp.servers.robot.oauth]
grant = "client_credentials"
client_id = "${{ROBOT_ID}}"
client_secret = "${{ROBOT_SECRET}}"
issuer = "{issuer}"
scopes = ["{SCOPE}"]
{extra}""")
    return config


__all__ = ["SCOPE", "AutoApprove", "Credentials", "client_credentials_mcp",
           "free_port", "oauth_mcp", "robot_config"]
