"""Ed25519 signatures over a bundle's digest manifest (the `cryptography` package).

A public key is written `ed25519:<base64 of its 32 raw bytes>`, in the host
config's `[trust] keys` and in a bundle's signature file. A private key is a
PKCS#8 PEM file, written owner-only. A signature says who built a bundle; it
never grants a capability.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from wasmext.errors import ConfigError, SignatureInvalid
from wasmext.files import atomic_write, read_regular

__all__ = ["generate_key", "is_public_key", "load_private_key", "public_key_of", "sign",
           "verify"]

PREFIX = "ed25519:"


def _raw_public(text: str) -> bytes | None:
    if not isinstance(text, str) or not text.startswith(PREFIX) or len(text) > 128:
        return None
    try:
        raw = base64.b64decode(text[len(PREFIX):], validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 32 else None


def is_public_key(text: str) -> bool:
    """Whether the text is an Ed25519 public key in the project's format."""
    return _raw_public(text) is not None


def generate_key(path: Path) -> str:
    """Write a new private key to `path` (mode 0600); its public key text."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    atomic_write(path, pem, mode=0o600)
    return public_key_of(path)


def load_private_key(path: Path) -> object:
    """Load an unencrypted Ed25519 private key from a PEM file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        raw = read_regular(path, 64 * 1024)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        key = serialization.load_pem_private_key(raw, None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: not an unencrypted Ed25519 private key (PEM): "
                          f"{type(exc).__name__}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path}: not an Ed25519 private key")
    return key


def public_key_of(path: Path) -> str:
    """The public key of the private key file, in the project's format."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = load_private_key(path)
    assert isinstance(key, Ed25519PrivateKey)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    return PREFIX + base64.b64encode(raw).decode()


def sign(key_path: Path, data: bytes) -> tuple[str, str]:
    """(public key text, base64 signature) of `data` with the key at `key_path`."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = load_private_key(key_path)
    assert isinstance(key, Ed25519PrivateKey)
    return public_key_of(key_path), base64.b64encode(key.sign(data)).decode()


def verify(data: bytes, public: str, signature: str, trusted: tuple[str, ...],
           where: str) -> None:
    """Raise SignatureInvalid unless `signature` over `data` is by `public`, a trusted key."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    raw = _raw_public(public)
    if raw is None:
        raise SignatureInvalid(f"{where}: the signature names no Ed25519 key")
    if public not in trusted:
        raise SignatureInvalid(f"{where}: signed by {public[:24]}..., a key this host does "
                               f"not trust ([trust] keys)")
    try:
        sig = base64.b64decode(signature, validate=True)
        Ed25519PublicKey.from_public_bytes(raw).verify(sig, data)
    except (InvalidSignature, binascii.Error, ValueError) as exc:
        raise SignatureInvalid(f"{where}: the signature does not match its digest "
                               f"manifest") from exc
