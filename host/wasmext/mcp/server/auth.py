"""Bearer-token auth for `wasmext mcp serve --http`.

    app = BearerAuth(app, token)        # 401 unless "Authorization: Bearer <token>"

The token comes from a file or an environment variable (`load_token`), is
compared in constant time (`hmac.compare_digest`), and is required whenever the
server binds an address that is not loopback (`require_token_for`); on loopback
it is optional, and required once given. A refusal is a bare 401 with
`WWW-Authenticate: Bearer`, never a hint about the token.

On any loopback address (all of 127.0.0.0/8 and ::1, however spelled) the
`Host` and `Origin` headers must name a loopback host (`rebinding_guard`): a
web page whose name an attacker re-points at 127.0.0.1 (DNS rebinding) sends
its own name and is refused with 421 (Host) or 403 (Origin).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings

from wasmext.errors import ConfigError
from wasmext.files import read_regular

__all__ = ["MIN_TOKEN_LENGTH", "BearerAuth", "is_loopback", "load_token", "rebinding_guard",
           "require_token_for"]

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

MIN_TOKEN_LENGTH = 16
MAX_TOKEN_FILE_BYTES = 64 * 1024
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def load_token(token_file: str | Path | None = None, token_env: str | None = None) -> str | None:
    """The bearer token from a file (first line) or an environment variable, or None."""
    if token_file is not None and token_env is not None:
        raise ConfigError("give the MCP token in a file or an environment variable, not both")
    if token_file is not None:
        try:
            text = read_regular(token_file, MAX_TOKEN_FILE_BYTES).decode("utf-8")
        except OSError as exc:
            raise ConfigError(f"MCP token file {token_file}: {exc.strerror or exc}") from None
        token = text.strip().splitlines()[0].strip() if text.strip() else ""
        where = f"token file {token_file}"
    elif token_env is not None:
        token = os.environ.get(token_env, "").strip()
        where = f"environment variable {token_env}"
    else:
        return None
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(f"MCP token from {where}: at least {MIN_TOKEN_LENGTH} printable "
                          "characters without spaces")
    return token


def is_loopback(address: str) -> bool:
    """Whether the address is localhost or a loopback IP."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def rebinding_guard(address: str) -> TransportSecuritySettings | None:
    """Host/Origin checks against DNS rebinding when `address` is loopback (else None):
    only loopback names, and the bound address in its canonical spelling, with any port."""
    if not is_loopback(address):
        return None
    names = list(LOOPBACK_NAMES)
    if address != "localhost":
        bound = ipaddress.ip_address(address.strip("[]"))
        shown = f"[{bound.compressed}]" if bound.version == 6 else bound.compressed
        if shown not in names:
            names.append(shown)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=[f"{name}:*" for name in names],
                                     allowed_origins=[f"http://{name}:*" for name in names])


def require_token_for(address: str, token: str | None) -> None:
    """Refuse to serve a non-loopback address without a token."""
    if token is None and not is_loopback(address):
        raise ConfigError(f"serving MCP on {address} (not loopback) needs a bearer token: "
                          "--token-file PATH or --token-env VAR")


class BearerAuth:
    """ASGI middleware: HTTP requests need `Authorization: Bearer <token>`."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]],
                 token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan events pass
            await self.app(scope, receive, send)
            return
        given = b""
        for key, value in scope.get("headers", []):
            if key.lower() == b"authorization":
                given = bytes(value)
                break
        if not hmac.compare_digest(given, self._expected):
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"www-authenticate", b"Bearer"),
                                    (b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized\n"})
            return
        await self.app(scope, receive, send)
