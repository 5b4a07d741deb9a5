"""Signed replies: a caller accepts an answer only from a worker holding a trusted key.

Transport permissions (docs/cluster.md, "A secured deployment") already keep other
clients from answering. Where the operator wants more (a shared or third-party
server, a leaked client credential), each worker signs its replies with an Ed25519
key (`[nats] reply_key`) and callers list the public keys they trust (`[nats]
trusted_workers`). The signature covers the request's subject and call id (so a
signed answer cannot be replayed to another call or extension), the error code and
text, and the body:

    Wasmext-Signer: ed25519:<base64 public key>
    Wasmext-Signature: <base64 signature of the digest below>

    sha256(subject \\n call id \\n error code \\n error text \\n [denials \\n]) + sha256(body)

(`denials`: a stage answer's `Wasmext-Denials` header, when it has one: sent only to a
caller that asked for it, so an older caller's digest is the one above.)
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

from wasmext.errors import SignatureInvalid
from wasmext.lifecycle.signing import PREFIX, load_private_key, public_key_of

__all__ = ["SIGNATURE_HEADER", "SIGNER_HEADER", "ReplySigner", "check_reply", "reply_digest"]

SIGNER_HEADER = "Wasmext-Signer"
SIGNATURE_HEADER = "Wasmext-Signature"
ERROR_HEADER = "Nats-Service-Error"
ERROR_CODE_HEADER = "Nats-Service-Error-Code"
DENIALS_HEADER = "Wasmext-Denials"  # contract.DENIALS_HEADER (this module needs no msgspec)


def reply_digest(subject: str, call_id: str, headers: dict[str, str], body: bytes) -> bytes:
    """What a reply's signature covers."""
    head = "\n".join((subject, call_id, headers.get(ERROR_CODE_HEADER, ""),
                      headers.get(ERROR_HEADER, ""), ""))
    denials = headers.get(DENIALS_HEADER)
    if denials is not None:  # sent only to a caller that asked, which covers it too
        head += denials + "\n"
    return (hashlib.sha256(head.encode("utf-8", "surrogatepass")).digest()
            + hashlib.sha256(body).digest())


class ReplySigner:
    """A worker's reply key, loaded once."""

    def __init__(self, key_path: Path) -> None:
        self._key: Any = load_private_key(key_path)
        self.public = public_key_of(key_path)

    def sign(self, subject: str, call_id: str, headers: dict[str, str], body: bytes
             ) -> dict[str, str]:
        """`headers` (the final reply headers, error ones included) with the signature."""
        signature = self._key.sign(reply_digest(subject, call_id, headers, body))
        return {**headers, SIGNER_HEADER: self.public,
                SIGNATURE_HEADER: base64.b64encode(signature).decode()}


def check_reply(subject: str, call_id: str, headers: dict[str, str], body: bytes,
                trusted: tuple[str, ...]) -> None:
    """Raise SignatureInvalid unless the reply is signed by one of `trusted`."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    signer, signature = headers.get(SIGNER_HEADER), headers.get(SIGNATURE_HEADER)
    if not signer or not signature:
        raise SignatureInvalid("the answer is not signed (a trusted worker signs its answers)")
    if signer not in trusted:
        raise SignatureInvalid("the answer is signed by a key not in trusted_workers")
    try:
        raw = base64.b64decode(signer[len(PREFIX):], validate=True)
        Ed25519PublicKey.from_public_bytes(raw).verify(
            base64.b64decode(signature, validate=True),
            reply_digest(subject, call_id, headers, body))
    except (InvalidSignature, ValueError) as exc:  # binascii.Error is a ValueError
        raise SignatureInvalid("the answer's signature does not match it") from exc
