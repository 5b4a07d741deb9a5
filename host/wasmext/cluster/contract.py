"""The extension contract on the wire: CP-Ext (pre, validator, post) and CP2 (provider).

    request   {trace_id, tenant_id, extensions{id, config},
               message{message_id, message_type, payload, metadata}, context}
    pre/post  {message, context}            validator {status: ok|reject, reason, details}
    provider  {trace_id, tenant_id, provider_id, prompt, parameters, context}
              -> {provider_id, output, usage, metadata}

JSON is the default; MessagePack when the sender says `Content-Type:
application/msgpack`. Beside the body, a wasmext caller sends headers: `Trace-Id`,
`Tenant-Id`, `Wasmext-Call-Id` (the idempotency key, the same on every attempt of one
call), `Wasmext-Deadline` (when the caller gives this attempt up, Unix time in
milliseconds) and `Wasmext-Calls-Left` (host calls the caller's call tree has left).

A whole plugin served by a worker (`cluster.plugins`) speaks MessagePack only, on
`<base>.describe` (an empty request; the answer is a `PluginAdvert`: the plugin's
registration map, which the caller checks as a guest's), `<base>.call` (a `PluginCall`
with the same headers; the answer a `PluginAnswer`) and `<base>.cancel` (a publish,
no reply: the body is the `Wasmext-Call-Id` of a call its caller gave up). A middleware
hook's guest runs the caller's inner layers with `next`: the caller names an inbox in
`Wasmext-Callback`, the worker sends each `next` there as a `NextRequest` and the
caller answers it with a `PluginAnswer` (its value the inner layers' result).
A caller that sends `Wasmext-Notices: 1` reads the host ops the worker refused the
plugin during the call (`cluster.notices`): a `PluginAnswer`'s `denials`, a stage
answer's `Wasmext-Denials` header; a worker sends them only to such a caller, so an older
caller, whose decoding refuses unknown keys, never gets them, and an older worker ignores
the header and sends none.

Decoding refuses unknown keys (naming the path), wrong types, more than `MAX_BYTES`
and nesting past the decoder's recursion limit: a peer is as untrusted as a plugin.
"""

from __future__ import annotations

import time
from typing import Any, Literal, TypeVar

import msgspec

from wasmext.cluster.callids import CallIds
from wasmext.errors import ContractError
from wasmext.text import clean

__all__ = [
    "CALLBACK_HEADER", "CALLS_LEFT_HEADER", "CALL_ID_HEADER", "CONTENT_TYPE",
    "DEADLINE_HEADER", "DENIALS_HEADER", "JSON", "MAX_BYTES", "MSGPACK", "NOTICES_HEADER",
    "NOTICES_VERSION", "TENANT_HEADER", "TRACE_HEADER", "CallIds", "ContractError", "DenialNotice",
    "ExtMessage", "ExtRef", "ExtRequest", "ExtResponse", "NextRequest", "PluginAdvert",
    "PluginAnswer", "PluginCall", "ProviderRequest", "ProviderResponse",
    "Verdict", "deadline_of", "decode", "encode", "encoding_of",
]

JSON = "application/json"
MSGPACK = "application/msgpack"
CONTENT_TYPE = "Content-Type"
MAX_BYTES = 1 << 20  # nats-server's default max_payload
TRACE_HEADER = "Trace-Id"
TENANT_HEADER = "Tenant-Id"
CALL_ID_HEADER = "Wasmext-Call-Id"
DEADLINE_HEADER = "Wasmext-Deadline"
CALLS_LEFT_HEADER = "Wasmext-Calls-Left"
# Where a worker sends a middleware guest's `next` for the caller to run (cluster.plugins)
CALLBACK_HEADER = "Wasmext-Callback"
# The caller reads denial notices of this version (absent: it reads none): a whole
# plugin's in `PluginAnswer.denials`, a stage's in the `DENIALS_HEADER` of its answer
NOTICES_HEADER = "Wasmext-Notices"
NOTICES_VERSION = "1"
DENIALS_HEADER = "Wasmext-Denials"


def deadline_of(headers: dict[str, str] | None) -> float | None:
    """The `Wasmext-Deadline` of a request as a time.monotonic() instant (None: none
    sent, or not a number). The header is wall-clock time, so hosts' clocks must agree."""
    raw = (headers or {}).get(DEADLINE_HEADER)
    if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > 16:
        return None
    return time.monotonic() + (int(raw) / 1000 - time.time())


class _Strict(msgspec.Struct, forbid_unknown_fields=True):
    pass


class ExtMessage(_Strict):
    """The message a stage gets and returns: id, type, payload, metadata."""

    message_id: str
    message_type: str
    payload: str
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class ExtRef(_Strict):
    """Which extension a request is for, with its config."""

    id: str
    config: dict[str, Any] = msgspec.field(default_factory=dict)


class ExtRequest(_Strict):
    """A CP-Ext request to a pre, validator or post stage."""

    trace_id: str
    tenant_id: str
    extensions: ExtRef
    message: ExtMessage
    context: dict[str, Any] = msgspec.field(default_factory=dict)


class ExtResponse(_Strict):
    """A pre or post stage's answer: the message and context."""

    message: ExtMessage
    context: dict[str, Any]


class Verdict(_Strict, omit_defaults=True):
    """A validator's answer: ok or reject, with a reason and details."""

    status: Literal["ok", "reject"]
    reason: str | None = None
    details: dict[str, Any] = msgspec.field(default_factory=dict)


class ProviderRequest(_Strict):
    """A CP2 request to a provider: the prompt and its parameters."""

    trace_id: str
    tenant_id: str
    provider_id: str
    prompt: str
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
    context: dict[str, Any] = msgspec.field(default_factory=dict)


class ProviderResponse(_Strict):
    """A provider's answer: output, token usage and metadata."""

    provider_id: str
    output: str
    usage: dict[str, int] = msgspec.field(default_factory=dict)
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class PluginCall(_Strict):
    """One hook call of a plugin served by a worker: the hook, its data, and the call's
    meta (the session id, the hook context of ABI minor 1)."""

    hook: str
    data: Any = None
    session: str | None = None
    context: Any = None


class DenialNotice(_Strict, omit_defaults=True):
    """A host op the worker refused the plugin during one call: the op, why, and the
    grant that would allow it (when one alone would)."""

    op: str
    message: str = ""
    capability: str | None = None


class PluginAnswer(_Strict, omit_defaults=True):
    """A worker's answer to a `PluginCall`: the result (`ok`), or how it failed: a
    `fault` (its `reason`, the fault's), a guest `error` (`code`), `quarantined`, or
    `state` (the worker's storage failed: nobody's fault); with either, the `denials`
    of the call (only to a caller that asked for them, `NOTICES_HEADER`). An `error`
    whose `reason` is "instance pool full" is the worker's own limit (InstancePoolFull),
    not the guest's: an older caller reads it as the guest error it was before."""

    ok: bool
    value: Any = None
    changed: bool = False
    stop: bool = False
    fuel: int = 0
    kind: Literal["fault", "error", "quarantined", "state"] | None = None
    reason: str = ""
    code: str = ""
    message: str = ""
    suggestion: str | None = None
    help_url: str | None = None
    denials: list[DenialNotice] = msgspec.field(default_factory=list)


class NextRequest(_Strict):
    """A middleware guest's `next` host call, sent back to the caller to run."""

    request: dict[str, Any]


class PluginAdvert(_Strict):
    """What a worker says a plugin it serves registers (checked by the caller as a
    guest's registration map is)."""

    plugin_id: str
    version: str
    registration: dict[str, Any]
    description: str = ""


T = TypeVar("T")
_JSON_ENC = msgspec.json.Encoder()
_MSGPACK_ENC = msgspec.msgpack.Encoder()
# A decoder per (type, encoding), made on first use: `msgspec.json.decode(type=)`
# builds the type's decoding plan again on every call. The types are this module's.
_DECODERS: dict[tuple[type, str], Any] = {}


def encoding_of(headers: dict[str, str] | None) -> str:
    """The encoding a message's headers name (JSON unless they say MessagePack)."""
    value = headers.get(CONTENT_TYPE) if headers else None
    if value is None:  # the contract's default: the usual request sends no header
        return JSON
    return MSGPACK if value.strip().lower() == MSGPACK else JSON


def encode(message: msgspec.Struct, encoding: str = JSON) -> bytes:
    """Encode a message as JSON, or MessagePack when asked."""
    return _MSGPACK_ENC.encode(message) if encoding == MSGPACK else _JSON_ENC.encode(message)


def decode(data: bytes, kind: type[T], encoding: str = JSON, *, peer: str = "peer") -> T:
    """`data` as a `kind`, or ContractError naming `peer` and what is wrong."""
    if len(data) > MAX_BYTES:
        raise ContractError(f"{peer}: message of {len(data)} bytes is over {MAX_BYTES}")
    decoder = _DECODERS.get((kind, encoding))
    if decoder is None:
        decoder = _DECODERS[(kind, encoding)] = (
            msgspec.msgpack.Decoder(kind) if encoding == MSGPACK else msgspec.json.Decoder(kind))
    try:
        return decoder.decode(data)  # type: ignore[no-any-return]
    except msgspec.ValidationError as exc:
        name = kind.__name__
        raise ContractError(f"{peer}: not {'an' if name[0] in 'AEIOU' else 'a'} {name}: "
                            f"{clean(exc, 300)}") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # msgpack: bad UTF-8 in a str
        raise ContractError(f"{peer}: not {'MessagePack' if encoding == MSGPACK else 'JSON'}: "
                            f"{clean(exc, 300)}") from None
    except RecursionError:
        raise ContractError(f"{peer}: {kind.__name__} nested too deep") from None
