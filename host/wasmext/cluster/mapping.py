"""In-process stage data <-> the wire contract, both ways.

In-process a stage gets `{"message": {"payload", "metadata", ...}, "context", "config"}`
and answers `{"message", "context"}` (pre, post, provider) or a verdict. On the wire
the message also carries `message_id` and `message_type`; a provider speaks CP2
(`prompt` in; `output`, `usage`, `metadata` out).
"""

from __future__ import annotations

from typing import Any

from wasmext.cluster.contract import (
    ExtMessage,
    ExtRef,
    ExtRequest,
    ExtResponse,
    ProviderRequest,
    ProviderResponse,
    Verdict,
)

__all__ = ["answer_from_provider", "answer_from_response", "data_from_provider_request",
           "data_from_request", "provider_request", "provider_response", "stage_request",
           "stage_response", "verdict_from_answer"]


def _message(raw: Any, fallback_id: str) -> ExtMessage:
    msg = raw if isinstance(raw, dict) else {}
    payload = msg.get("payload")
    metadata = msg.get("metadata")
    return ExtMessage(str(msg.get("message_id") or fallback_id),
                      str(msg.get("message_type") or "chat"),
                      payload if isinstance(payload, str) else "",
                      dict(metadata) if isinstance(metadata, dict) else {})


def _as_dict(message: ExtMessage) -> dict[str, Any]:
    return {"message_id": message.message_id, "message_type": message.message_type,
            "payload": message.payload, "metadata": message.metadata}


def _context(data: Any) -> dict[str, Any]:
    ctx = data.get("context") if isinstance(data, dict) else None
    return dict(ctx) if isinstance(ctx, dict) else {}


# -- the calling side ----------------------------------------------------------------

def stage_request(ext_id: str, data: Any, trace_id: str, tenant_id: str) -> ExtRequest:
    """The wire request for in-process stage data."""
    config = data.get("config") if isinstance(data, dict) else None
    return ExtRequest(trace_id, tenant_id, ExtRef(ext_id, dict(config or {})),
                      _message(data.get("message") if isinstance(data, dict) else None,
                               trace_id), _context(data))


def answer_from_response(response: ExtResponse) -> dict[str, Any]:
    """In-process stage data from a wire response."""
    return {"message": _as_dict(response.message), "context": response.context}


def provider_request(ext_id: str, data: Any, trace_id: str, tenant_id: str) -> ProviderRequest:
    """The CP2 provider request for in-process stage data."""
    msg = _message(data.get("message") if isinstance(data, dict) else None, trace_id)
    config = data.get("config") if isinstance(data, dict) else None
    return ProviderRequest(trace_id, tenant_id, ext_id, msg.payload, dict(config or {}),
                           _context(data))


def answer_from_provider(data: Any, response: ProviderResponse) -> dict[str, Any]:
    """In-process stage data from a provider's answer: its output as the payload."""
    msg = _message(data.get("message") if isinstance(data, dict) else None, "")
    # Merged over what the earlier stages set: a provider adds to the metadata.
    metadata = {**msg.metadata, **response.metadata, "provider_id": response.provider_id}
    if response.usage:
        metadata["usage"] = dict(response.usage)
    return {"message": {**_as_dict(msg), "payload": response.output, "metadata": metadata}}


# -- the serving side ----------------------------------------------------------------

def data_from_request(request: ExtRequest) -> dict[str, Any]:
    """What the in-process stage gets for a CP-Ext request."""
    message = request.message  # `_as_dict`, inline: a worker makes one per request
    return {"message": {"message_id": message.message_id, "message_type": message.message_type,
                        "payload": message.payload, "metadata": message.metadata},
            "context": request.context, "config": request.extensions.config}


def stage_response(request: ExtRequest, value: Any, changed: bool) -> ExtResponse | None:
    """A pre/post answer as CP-Ext; None when it has no string message.payload."""
    if not changed:  # the stage left the message as it was
        return ExtResponse(request.message, request.context)
    msg = value.get("message") if isinstance(value, dict) else None
    if not isinstance(msg, dict):
        return None
    payload = msg.get("payload")
    if not isinstance(payload, str):
        return None
    # `_message`, inline (a worker makes one per request), its payload checked above.
    metadata, ctx = msg.get("metadata"), value.get("context")
    return ExtResponse(ExtMessage(str(msg.get("message_id") or request.message.message_id),
                                  str(msg.get("message_type") or "chat"), payload,
                                  dict(metadata) if isinstance(metadata, dict) else {}),
                       dict(ctx) if isinstance(ctx, dict) else request.context)


def verdict_from_answer(value: Any) -> Verdict | None:
    """The verdict a validator's answer holds, or None if it holds none."""
    if not isinstance(value, dict) or value.get("status") not in ("ok", "reject"):
        return None
    reason, details = value.get("reason"), value.get("details")
    return Verdict(value["status"], reason if isinstance(reason, str) else None,
                   dict(details) if isinstance(details, dict) else {})


def data_from_provider_request(request: ProviderRequest) -> dict[str, Any]:
    """In-process stage data for a provider request received from the wire."""
    message = {"message_id": request.trace_id, "message_type": "chat",
               "payload": request.prompt, "metadata": {}}
    return {"message": message, "context": request.context, "config": request.parameters}


def provider_response(plugin_id: str, value: Any) -> ProviderResponse | None:
    """The provider response for a plugin's answer, or None if it has no string payload."""
    if not isinstance(value, dict) or not isinstance(value.get("message"), dict) \
            or not isinstance(value["message"].get("payload"), str):
        return None
    metadata = value["message"].get("metadata")
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    usage = metadata.pop("usage", {})
    usage = {k: v for k, v in usage.items() if isinstance(k, str) and type(v) is int
             and v >= 0} if isinstance(usage, dict) else {}
    return ProviderResponse(plugin_id, value["message"]["payload"], usage, metadata)
