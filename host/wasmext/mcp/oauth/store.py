"""OAuth tokens and client registrations of MCP servers, one file per server.

    data_dir/mcp-oauth/<server>.json    (folder 0700, file 0600)

The SDK's `TokenStorage`: the provider reads the file when a connection starts and
writes it (atomically: temp+fsync+rename) whenever it obtains tokens or registers.
The file records the server URL it belongs to and when the access token expires
(absolute, so a restart knows to refresh). Anything unreadable — truncated,
corrupt, too large, another URL's — reads as absent: the provider authorizes
again instead of crashing. Token values never reach a log or a message.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext.files import atomic_write, read_regular

if TYPE_CHECKING:
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

__all__ = ["FORMAT", "MAX_FILE", "FileTokenStorage", "decode", "encode", "token_path"]

log = logging.getLogger("wasmext.mcp")

FORMAT = 1
MAX_FILE = 256 * 1024


def token_path(folder: Path, server: str) -> Path:
    """The file of `server` (a checked server name: letters, digits, '_' and '-')."""
    return folder / f"{server}.json"


def encode(url: str, tokens: OAuthToken | None, client: OAuthClientInformationFull | None,
           now: float) -> bytes:
    """The file's bytes: the URL, the tokens with their absolute expiry, the client."""
    doc: dict[str, Any] = {"format": FORMAT, "url": url, "tokens": None, "expires_at": None,
                           "client": None}
    if tokens is not None:
        doc["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        if tokens.expires_in is not None:
            doc["expires_at"] = now + tokens.expires_in
    if client is not None:
        doc["client"] = client.model_dump(mode="json", exclude_none=True)
    return json.dumps(doc, sort_keys=True).encode("utf-8")


def decode(data: bytes, url: str, now: float
           ) -> tuple[OAuthToken | None, OAuthClientInformationFull | None]:
    """What `encode` wrote for `url`, the tokens' expires_in counted from `now`; for any
    other bytes (or another URL's file) (None, None)."""
    from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
    from pydantic import ValidationError

    if len(data) > MAX_FILE:
        return None, None
    try:
        doc = json.loads(data)
        if not (isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("url") == url):
            return None, None
        raw_tokens, raw_client, expires_at = doc.get("tokens"), doc.get("client"), \
            doc.get("expires_at")
        tokens = None if raw_tokens is None else OAuthToken.model_validate(raw_tokens)
        client = None if raw_client is None else \
            OAuthClientInformationFull.model_validate(raw_client)
        if tokens is not None and expires_at is not None:
            if not isinstance(expires_at, (int, float)) or isinstance(expires_at, bool) or \
                    expires_at != expires_at:  # NaN
                return None, None
            tokens.expires_in = max(0, int(min(expires_at - now, 2**31)))
    except (ValueError, TypeError, RecursionError, ValidationError):
        return None, None  # json's and pydantic's errors: a file that is not ours
    return tokens, client


class FileTokenStorage:
    """The SDK's TokenStorage for one server, kept in `path` (see the module doc)."""

    def __init__(self, path: Path, url: str, server: str) -> None:
        self.path = path
        self.url = url
        self.server = server

    def _read(self) -> tuple[OAuthToken | None, OAuthClientInformationFull | None]:
        try:
            data = read_regular(self.path, MAX_FILE)
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            log.warning("mcp server %s: cannot read its OAuth tokens (%s); authorizing again",
                        self.server, type(exc).__name__)
            return None, None
        tokens, client = decode(data, self.url, time.time())
        if tokens is None and client is None and data:
            log.warning("mcp server %s: its OAuth token file is unreadable or for another "
                        "URL; authorizing again", self.server)
        return tokens, client

    def _write(self, tokens: OAuthToken | None, client: OAuthClientInformationFull | None
               ) -> None:
        folder = self.path.parent
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(folder, 0o700)
        atomic_write(self.path, encode(self.url, tokens, client, time.time()), mode=0o600)

    async def get_tokens(self) -> OAuthToken | None:
        """The stored tokens, or None."""
        return self._read()[0]

    async def set_tokens(self, tokens: OAuthToken) -> None:
        """Store the tokens, keeping the client information."""
        self._write(tokens, self._read()[1])

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        """The stored client registration, or None."""
        return self._read()[1]

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        """Store the client registration, keeping the tokens."""
        self._write(self._read()[0], client_info)
