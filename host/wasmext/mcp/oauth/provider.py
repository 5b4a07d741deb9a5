"""OAuth for MCP connections over sse and http: the SDK's client support, wired in.

A server with an `oauth` table (see `oauth_config`) connects through an httpx2
client whose `auth=` is the SDK's provider: `OAuthClientProvider` (authorization
code + PKCE, dynamic client registration) or `ClientCredentialsOAuthProvider`.
Tokens and the registration live in `FileTokenStorage` (see `oauth_store`).

Authorization happens before the MCP session starts, in one request to the
server's URL: a 401 there runs discovery, registration and the token request
(and, for the authorization code, waits up to `authorize_timeout_s` for the
operator), so the session's own connect timeout never has to cover a person.

For the authorization code, wasmext prints the authorization address (cleaned: the
authorization server chose it) and takes the code from a one-shot listener on the
loopback `redirect_uri`, or from the address pasted on stdin (`callback = "stdin"`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs, urlsplit

import anyio

from wasmext.errors import McpAuthError
from wasmext.mcp.oauth.config import OAuthSettings, loopback_address
from wasmext.mcp.oauth.store import FileTokenStorage, token_path
from wasmext.text import clean

if TYPE_CHECKING:
    import httpx2
    from mcp.shared.auth import AuthorizationCodeResult

    from wasmext.mcp.client.spec import ServerSpec

__all__ = ["Prompt", "authorization_code_from", "build_auth", "print_prompt"]

Prompt = Callable[[str, str, str], None]  # (server, cleaned address, how the code comes back)
URL_CAP = 2048
DONE_PAGE = (b"<!doctype html><title>wasmext</title>"
             b"<p>Authorization received. You can close this window.</p>")


def print_prompt(server: str, url: str, callback: str) -> None:
    """The default prompt: the address on stderr, for the operator to open."""
    then = ("then paste here the address your browser ends on" if callback == "stdin"
            else "wasmext is listening for the answer")
    print(f"mcp server {server}: authorize wasmext at\n  {url}\n({then})", file=sys.stderr,
          flush=True)


def authorization_code_from(address: str) -> AuthorizationCodeResult:
    """The code, state and issuer of a redirect address (or its query); McpAuthError for
    an error the authorization server sent (its words cleaned) or no code."""
    from mcp.shared.auth import AuthorizationCodeResult

    text = address.strip()
    query = urlsplit(text).query if "://" in text or text.startswith("/") else text.lstrip("?")
    params = {k: v[0] for k, v in parse_qs(query[:URL_CAP * 4]).items()}
    if "error" in params:
        said = clean(f"{params['error']}: {params.get('error_description', '')}", 300)
        raise McpAuthError(f"the authorization server refused: {said}")
    if not params.get("code"):
        raise McpAuthError("the redirect address carries no authorization code")
    return AuthorizationCodeResult(code=params["code"], state=params.get("state"),
                                   iss=params.get("iss"))


class _Listener:
    """A one-shot HTTP listener on the loopback redirect URI, in a thread: it takes the
    first request that carries the `state` of the authorization request (another local
    process cannot end the flow with a request of its own)."""

    def __init__(self, redirect_uri: str, state: str | None) -> None:
        address = loopback_address(redirect_uri)
        assert address is not None  # checked with the config
        self.path = urlsplit(redirect_uri).path or "/"
        self.answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        loop, listener = asyncio.get_running_loop(), self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path != listener.path:
                    self.send_error(404)
                    return
                if state is not None and parse_qs(parts.query).get("state") != [state]:
                    self.send_error(400, "not the answer wasmext waits for")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(DONE_PAGE)))
                self.end_headers()
                self.wfile.write(DONE_PAGE)
                loop.call_soon_threadsafe(listener._deliver, self.path)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the query holds the code: never logged

        host = address[0].strip("[]")
        server_class = type("CallbackServer", (ThreadingHTTPServer,), {
            "address_family": socket.AF_INET6 if ":" in host else socket.AF_INET,
            "daemon_threads": True})
        try:
            self.server = server_class((host, address[1]), Handler)
        except OSError as exc:
            raise McpAuthError(f"cannot listen on {host}:{address[1]} for the OAuth "
                               f"callback: {exc.strerror or exc}") from None
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.1},
                                       name="wasmext-oauth-callback", daemon=True)
        self.thread.start()

    def _deliver(self, path: str) -> None:
        if not self.answer.done():
            self.answer.set_result(path)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _CodeFlow:
    """The redirect and callback handlers of one server's authorization code flow."""

    def __init__(self, server: str, settings: OAuthSettings, prompt: Prompt) -> None:
        self.server, self.settings, self.prompt = server, settings, prompt
        self.listener: _Listener | None = None

    async def redirect(self, url: str) -> None:
        if self.settings.callback == "loopback":
            try:
                state = parse_qs(urlsplit(url).query).get("state", [None])[0]
                self.listener = _Listener(self.settings.redirect_uri, state)
            except McpAuthError as err:
                raise McpAuthError(f"mcp server {self.server}: {err.message}") from None
        try:  # the address is the authorization server's choice: cleaned
            self.prompt(self.server, clean(url, URL_CAP), self.settings.callback)
        except BaseException:
            await self._close()
            raise

    async def callback(self) -> AuthorizationCodeResult:
        limit = self.settings.authorize_timeout_s
        try:
            with anyio.fail_after(limit):
                if self.listener is not None:
                    return authorization_code_from(await self.listener.answer)
                line = await anyio.to_thread.run_sync(sys.stdin.readline, URL_CAP * 4,
                                                      abandon_on_cancel=True)
                return authorization_code_from(line)
        except TimeoutError:
            raise McpAuthError(f"mcp server {self.server}: nobody authorized wasmext "
                               f"within {limit:g} s") from None
        except McpAuthError as err:
            raise McpAuthError(f"mcp server {self.server}: {err.message}") from None
        finally:
            await self._close()

    async def _close(self) -> None:
        listener, self.listener = self.listener, None
        if listener is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(listener.close)


class _CleanRecords(logging.Filter):
    """The SDK logs the authorization server's words (a token endpoint's error body, in an
    exception's text): each record becomes one cleaned line, its traceback folded in."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text = f"{text}: {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        record.msg, record.args, record.exc_info, record.exc_text = clean(text), (), None, None
        return True


_SDK_LOGGERS = ("mcp.client.auth.oauth2", "mcp.client.auth.utils",
                "mcp.client.auth.extensions.client_credentials")


def build_auth(spec: ServerSpec, folder: Path, prompt: Prompt | None = None) -> httpx2.Auth:
    """The SDK's OAuth provider for `spec` (which has an `oauth` table)."""
    for name in _SDK_LOGGERS:
        sdk_log = logging.getLogger(name)
        if not any(isinstance(f, _CleanRecords) for f in sdk_log.filters):
            sdk_log.addFilter(_CleanRecords())
    from mcp.client.auth import OAuthClientProvider
    from mcp.shared.auth import OAuthClientMetadata

    settings, url = spec.oauth, str(spec.url)
    assert settings is not None
    storage = FileTokenStorage(token_path(folder, spec.name), url, spec.name)
    if settings.grant == "client_credentials":
        from mcp.client.auth.extensions.client_credentials import (
            ClientCredentialsOAuthProvider,
        )

        return cast("httpx2.Auth", _expiry_aware(ClientCredentialsOAuthProvider)(
            url, storage, str(settings.client_id), str(settings.client_secret),
            settings.token_endpoint_auth_method, settings.scope, settings.issuer))
    flow = _CodeFlow(spec.name, settings, prompt or print_prompt)
    metadata = OAuthClientMetadata(
        client_name=settings.client_name, redirect_uris=[settings.redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"], response_types=["code"],
        scope=settings.scope, token_endpoint_auth_method="none")
    return cast("httpx2.Auth", _expiry_aware(OAuthClientProvider)(
        url, metadata, storage, flow.redirect, flow.callback))


_AWARE: dict[type[Any], type[Any]] = {}


def _expiry_aware(base: type[Any]) -> type[Any]:
    """`base` whose stored tokens keep their expiry: an expired one is refreshed (or
    obtained again) before it is sent, instead of after a 401."""
    if base not in _AWARE:
        async def _initialize(self: Any) -> None:
            await base._initialize(self)
            tokens = self.context.current_tokens
            if tokens is not None and tokens.expires_in is not None:
                self.context.update_token_expiry(tokens)
        _AWARE[base] = type(f"ExpiryAware{base.__name__}", (base,),
                            {"_initialize": _initialize})
    return _AWARE[base]
