"""The [nats] table's schema (`NatsTable`): read only when a wasmext.toml is parsed;
what it makes, `NatsAuth`, lives in `cluster.natsauth`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from wasmext.cluster.natsauth import _FILE_KEYS, NatsAuth, _read_secret
from wasmext.lifecycle.signing import is_public_key
from wasmext.validation import SECTION, problem

__all__ = ["NatsTable"]


def _public_key(value: str) -> str:
    if not is_public_key(value):
        problem("must be an 'ed25519:<base64>' public key")
    return value


NonEmpty = Annotated[str, Field(strict=True, min_length=1)]


class NatsTable(BaseModel):
    """The [nats] table of wasmext.toml (secrets only by file: `password_file`, ...)."""

    model_config = SECTION

    url: NonEmpty | None = None
    user: NonEmpty | None = None
    inbox_prefix: NonEmpty | None = None
    password_file: NonEmpty | None = None
    token_file: NonEmpty | None = None
    creds: NonEmpty | None = None
    nkey_seed: NonEmpty | None = None
    tls_ca: NonEmpty | None = None
    tls_cert: NonEmpty | None = None
    tls_key: NonEmpty | None = None
    reply_key: NonEmpty | None = None
    trusted_workers: list[Annotated[str, AfterValidator(_public_key)]] = []

    def auth(self, base: Path, where: str = "nats") -> NatsAuth:
        """The settings as a connection takes them: paths under `base`, secrets read."""
        paths = {k: str(base / v) for k in _FILE_KEYS if (v := getattr(self, k)) is not None}
        password = paths.pop("password_file", None)
        token = paths.pop("token_file", None)
        return NatsAuth(
            url=self.url, user=self.user, inbox_prefix=self.inbox_prefix,
            password=None if password is None else _read_secret(Path(password),
                                                                f"{where}.password_file"),
            token=None if token is None else _read_secret(Path(token), f"{where}.token_file"),
            trusted_workers=tuple(self.trusted_workers), **paths)
