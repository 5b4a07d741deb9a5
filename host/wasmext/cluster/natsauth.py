"""Credentials and TLS for the NATS connection, from wasmext.toml and the environment.

    [nats]
    url = "tls://nats.internal:4222"     # a url's user:password@ works too (redacted)
    user = "caller"
    password_file = "/run/secrets/nats"  # or $WASMEXT_NATS_PASSWORD
    # token_file = ...                   # or $WASMEXT_NATS_TOKEN
    # creds = "caller.creds"             # a JWT + nkey credentials file
    # nkey_seed = "caller.nk"            # an nkey seed file
    tls_ca = "ca.pem"                    # verify the server; tls_cert + tls_key: mutual TLS
    inbox_prefix = "_INBOX_caller"       # replies to this connection come back under it
    reply_key = "worker.key"             # a worker signs its replies (cluster.signed)
    trusted_workers = ["ed25519:..."]    # a caller accepts only replies signed by these

The environment (`WASMEXT_NATS_URL`, `_USER`, `_PASSWORD`, `_TOKEN`, `_CREDS`,
`_NKEY_SEED`, `_TLS_CA`, `_TLS_CERT`, `_TLS_KEY`, `_INBOX_PREFIX`, `_REPLY_KEY`,
`_TRUSTED_WORKERS` comma-separated) overrides the file. Secrets come from the
environment or files, never from wasmext.toml itself, and never leave in text:
`redact()` takes a url's credentials and the secret values out of every log line,
error and terminal line the cluster writes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from wasmext.errors import ConfigError
from wasmext.lifecycle.signing import is_public_key
from wasmext.text import redact_url

__all__ = ["ENV_PREFIX", "NatsAuth", "redact"]  # its [nats] table: cluster.natsconfig

ENV_PREFIX = "WASMEXT_NATS_"
_FILE_KEYS = ("password_file", "token_file", "creds", "nkey_seed", "tls_ca", "tls_cert",
              "tls_key", "reply_key")
_SECRET_MAX = 4096


@dataclass(frozen=True)
class NatsAuth:
    """How a connection authenticates and encrypts; secrets are left out of its repr."""

    url: str | None = field(default=None, repr=False)
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    creds: str | None = None  # a credentials file (user JWT and nkey seed)
    nkey_seed: str | None = None  # an nkey seed file
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    inbox_prefix: str | None = None
    reply_key: str | None = None  # an Ed25519 private key file: a worker signs replies
    trusted_workers: tuple[str, ...] = ()  # a caller accepts replies signed by these only

    def with_env(self, env: Mapping[str, str] | None = None) -> NatsAuth:
        """These settings with the `WASMEXT_NATS_*` variables of `env` over them."""
        env = os.environ if env is None else env
        changes: dict[str, Any] = {}
        for f in fields(self):
            value = env.get(ENV_PREFIX + f.name.upper())
            if value and f.name == "trusted_workers":
                changes[f.name] = _public_keys(value.split(","), ENV_PREFIX + "TRUSTED_WORKERS")
            elif value:
                changes[f.name] = value
        return replace(self, **changes) if changes else self

    def secrets(self) -> list[str]:
        """Every secret value this connection uses (for redaction)."""
        out = [s for s in (self.password, self.token) if s]
        match = re.match(r"(?i)[a-z][a-z0-9+.-]*://([^/@\s]*)@", self.url or "")
        if match:
            out.extend(p for p in match.group(1).split(":") if len(p) >= 4)
        return out

    def options(self) -> dict[str, Any]:
        """Keyword arguments for nats-py's `connect`."""
        opts: dict[str, Any] = {}
        if self.user is not None:
            opts["user"] = self.user
        if self.password is not None:
            opts["password"] = self.password
        if self.token is not None:
            opts["token"] = self.token
        if self.creds is not None:
            opts["user_credentials"] = self.creds
        if self.nkey_seed is not None:
            opts["nkeys_seed"] = self.nkey_seed
        if self.inbox_prefix is not None:
            opts["inbox_prefix"] = self.inbox_prefix
        if self.tls_ca or self.tls_cert:
            import ssl

            context = ssl.create_default_context(cafile=self.tls_ca)
            if self.tls_cert:
                context.load_cert_chain(self.tls_cert, self.tls_key)
            opts["tls"] = context
        return opts


def redact(text: str, url: str | None = None, auth: NatsAuth | None = None) -> str:
    """`text` with url credentials and the secrets of `url` and `auth` replaced by ***."""
    secrets = NatsAuth(url=url).secrets() + (auth.secrets() if auth is not None else [])
    text = redact_url(text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _public_keys(keys: list[str], where: str) -> tuple[str, ...]:
    keys = [k.strip() for k in keys]
    if not all(is_public_key(k) for k in keys):
        raise ConfigError(f"{where}: must list 'ed25519:<base64>' public keys")
    return tuple(keys)


def _read_secret(path: Path, where: str) -> str:
    try:
        with path.open("rb") as fh:
            raw = fh.read(_SECRET_MAX + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > _SECRET_MAX:
        raise ConfigError(f"{where}: {path} is over {_SECRET_MAX} bytes")
    try:
        return raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: {path} is not UTF-8 text") from None
