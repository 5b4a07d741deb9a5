"""The `oauth` table of an sse or http MCP server: how wasmext obtains its bearer token.

    [mcp.servers.remote.oauth]       # authorization code + PKCE, the operator approves once
    client_name = "wasmext"
    scopes = ["tools"]
    redirect_uri = "http://127.0.0.1:33418/callback"   # a loopback listener takes the code
    callback = "loopback"            # or "stdin": paste the address the browser ends on

    [mcp.servers.robot.oauth]        # no operator: client credentials
    grant = "client_credentials"
    client_id = "${ROBOT_ID}"
    client_secret = "${ROBOT_SECRET}"      # or client_secret_file = "robot.secret"
    issuer = "https://auth.example.com"    # credentials are only ever sent there

Checked with pydantic (types, unknown fields), then the rules between fields; a
problem is one ConfigError naming the file and the field. Secrets never reach a
message or a repr.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, StrictFloat, StrictStr

from wasmext.errors import ConfigError
from wasmext.files import read_regular

__all__ = ["DEFAULT_REDIRECT_URI", "OAuthSettings", "loopback_address", "parse_oauth"]

DEFAULT_REDIRECT_URI = "http://127.0.0.1:33418/callback"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_AUTHORIZE_S = 3600.0
MAX_SECRET_FILE = 64 * 1024


@dataclass(frozen=True)
class OAuthSettings:
    """One server's [mcp.servers.NAME.oauth] table (values ${VAR}-substituted)."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    grant: Literal["authorization_code", "client_credentials"] = "authorization_code"
    client_name: StrictStr = "wasmext"
    scopes: tuple[StrictStr, ...] = ()
    redirect_uri: StrictStr = DEFAULT_REDIRECT_URI
    callback: Literal["loopback", "stdin"] = "loopback"
    client_id: StrictStr | None = None
    client_secret: StrictStr | None = field(default=None, repr=False)
    client_secret_file: StrictStr | None = None
    issuer: StrictStr | None = None
    token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post"] = \
        "client_secret_basic"
    authorize_timeout_s: StrictFloat = 300.0

    @property
    def scope(self) -> str | None:
        """The scopes as OAuth writes them (space-separated), None for none."""
        return " ".join(self.scopes) or None


def _substituted(raw: dict[str, Any], subst: Callable[[Any, str], str], fld: str
                 ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, str):
            out[key] = subst(value, f"{fld}.{key}")
        elif isinstance(value, list):
            out[key] = [subst(v, f"{fld}.{key}[{i}]") if isinstance(v, str) else v
                        for i, v in enumerate(value)]
        else:
            out[key] = value
    return out


def _http_url(url: str | None) -> bool:
    parts = urlsplit(url or "")
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def loopback_address(url: str) -> tuple[str, int] | None:
    """(host, port) of an http://127.0.0.1:PORT/... redirect URI, else None."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS or not port:
        return None
    return str(parts.hostname), port


def parse_oauth(raw: Any, path: Path | None, fld: str, transport: str,
                subst: Callable[[Any, str], str]) -> OAuthSettings:
    """The `oauth` table at `fld` of a server whose transport is `transport`."""
    from pydantic import TypeAdapter, ValidationError

    where = path or "config"

    def need(cond: bool, sub: str, why: str) -> None:
        if not cond:
            raise ConfigError(f"{where}: field '{fld}{'.' + sub if sub else ''}': {why}")

    server = fld.split(".")[2] if fld.count(".") >= 3 else fld
    need(transport != "stdio", "", f"only sse and http servers take oauth ({server} is stdio)")
    need(isinstance(raw, dict), "", "must be a table")
    try:
        settings = TypeAdapter(OAuthSettings).validate_python(_substituted(raw, subst, fld))
    except ValidationError as exc:
        first = exc.errors()[0]  # its message only: `input` may be a secret
        loc = ".".join(str(p) for p in first["loc"])
        why = "unknown field" if first["type"] == "unexpected_keyword_argument" else \
            str(first["msg"]).lower()
        raise ConfigError(f"{where}: field '{fld}.{loc}': {why}") from None
    need(0 < settings.authorize_timeout_s <= MAX_AUTHORIZE_S, "authorize_timeout_s",
         f"must be a number of seconds in (0, {MAX_AUTHORIZE_S:g}]")
    need(0 < len(settings.client_name) <= 200, "client_name", "1 to 200 characters")
    need(all(s and not any(c.isspace() for c in s) for s in settings.scopes), "scopes",
         "each scope is one word")
    need(not (settings.client_secret and settings.client_secret_file), "client_secret_file",
         "give client_secret or client_secret_file, not both")
    if settings.client_secret_file:
        secret_path = Path(settings.client_secret_file)
        if not secret_path.is_absolute() and path is not None:
            secret_path = path.parent / secret_path
        try:
            secret = read_regular(secret_path, MAX_SECRET_FILE).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = (exc.strerror if isinstance(exc, OSError) else None) or type(exc).__name__
            raise ConfigError(f"{where}: field '{fld}.client_secret_file': cannot read it "
                              f"({why})") from None
        need(bool(secret), "client_secret_file", "the file is empty")
        settings = dataclasses.replace(settings, client_secret=secret)
    if settings.grant == "client_credentials":
        need(bool(settings.client_id), "client_id", "client_credentials needs a client_id")
        need(bool(settings.client_secret), "client_secret",
             "client_credentials needs client_secret or client_secret_file")
        need(_http_url(settings.issuer), "issuer", "client_credentials needs the issuer "
             "URL of the authorization server its credentials belong to")
        return settings
    need(settings.client_id is None and settings.client_secret is None, "client_id",
         "authorization_code registers its own client (client_id is for client_credentials)")
    need(_http_url(settings.redirect_uri), "redirect_uri", "must be an http(s) URL")
    if settings.callback == "loopback":
        need(loopback_address(settings.redirect_uri) is not None, "redirect_uri",
             "the loopback callback needs http://127.0.0.1:PORT/... (or localhost, [::1])")
    return settings
