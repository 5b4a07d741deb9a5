"""One chat completion from an OpenAI-compatible endpoint, with httpx.

Shared by `llm.complete` (services.llm.service) and `wasmext run --model-url`
(models.OpenAIModel). The answer is read in pieces and abandoned past
`max_answer_bytes`, and every byte of it, headers included, is read by the
deadline (`services.http.deadline`); every failure is a `ModelError` saying
whether it was the deadline (`timed_out`) or the endpoint.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wasmext.errors import ModelError
from wasmext.sandbox.codec import DecodeError, check_depth
from wasmext.services.http.deadline import bounded, passed
from wasmext.text import clean, redact_url, without_credentials

if TYPE_CHECKING:
    import httpx2

__all__ = ["ChatAnswer", "ChatRequest", "ModelError", "OpenAIClient", "loads_answer"]

# An answer nests a few levels; tool-call arguments go on to a guest, whose
# MessagePack depth cap (64 by default) is the same bound.
MAX_ANSWER_DEPTH = 64


@dataclass(frozen=True)
class ChatRequest:
    """A chat completion request: messages, model, limits and tools."""

    messages: Sequence[dict[str, Any]]
    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    tools: Sequence[dict[str, Any]] = ()
    timeout_s: float = 60.0
    # The OpenAI `response_format` ({"type": "json_object"} for JSON mode), or None.
    response_format: dict[str, Any] | None = None


@dataclass(frozen=True)
class ChatAnswer:
    """A chat completion's text, finish reason, token counts and tool calls."""

    text: str
    finish_reason: str = "stop"
    input_tokens: int = 0
    output_tokens: int = 0
    model: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    # False when the endpoint sent no usage, or counts that are not non-negative ints:
    # then the tokens above are 0 and llm.complete charges the whole reservation.
    usage_reported: bool = True


def _tokens(usage: Any, key: str) -> int | None:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if type(value) is int and value >= 0 else None


def loads_answer(raw: bytes | str) -> Any:
    """JSON from a model server, nested at most MAX_ANSWER_DEPTH deep; ValueError if not.

    json recurses once per level: a document nested 200,000 deep would end in a
    RecursionError, which is refused here by name instead."""
    try:
        doc = json.loads(raw)
        # Every level opens a bracket: an answer with fewer of them than the cap cannot
        # nest past it, and counting them (in C) costs less than walking the document.
        opening = raw.count(b"{") + raw.count(b"[") if isinstance(raw, bytes) \
            else raw.count("{") + raw.count("[")
        if opening > MAX_ANSWER_DEPTH:
            check_depth(doc, MAX_ANSWER_DEPTH)
    except (RecursionError, DecodeError):
        raise ValueError(f"JSON nested deeper than {MAX_ANSWER_DEPTH} levels") from None
    return doc


def parse_answer(doc: Any, model: str) -> ChatAnswer:
    """A chat.completion document; ValueError when it is not one."""
    try:
        choice = doc["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise ValueError(f"no choices[0].message in the answer ({exc!r})") from None
    if not isinstance(message, dict):
        raise ValueError("choices[0].message is not an object")
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {}) if isinstance(call, dict) else {}
        try:
            args = loads_answer(fn.get("arguments") or "{}")
        except (ValueError, TypeError):
            args = {"_raw": fn.get("arguments")}
        calls.append({"call_id": str(call.get("id", "")), "tool": str(fn.get("name", "")),
                      "args": args})
    usage = doc.get("usage")
    content = message.get("content")
    prompt, completion = _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")
    return ChatAnswer(text=content if isinstance(content, str) else "",
                      finish_reason=str(choice.get("finish_reason") or "stop"),
                      input_tokens=prompt or 0, output_tokens=completion or 0,
                      model=str(doc.get("model") or model), tool_calls=calls,
                      usage_reported=prompt is not None and completion is not None)


class OpenAIClient:
    """POST {base_url}/chat/completions."""

    def __init__(self, base_url: str, api_key: str | None = None,
                 max_answer_bytes: int = 4 << 20) -> None:
        # The URL's password travels as a Basic Authorization header, so that neither
        # the HTTP library's log nor an error ever shows it.
        self.url, self.basic = without_credentials(base_url.rstrip("/") + "/chat/completions")
        self.shown = redact_url(self.url)
        self.api_key = api_key
        self.max_answer_bytes = max_answer_bytes
        # The same for every request, made once (the answer is read raw: identity).
        self._headers = [("Accept", "application/json"), ("Accept-Encoding", "identity"),
                         ("Connection", "keep-alive"), ("Content-Type", "application/json"),
                         ("User-Agent", "wasmext")]
        if api_key:
            self._headers.append(("Authorization", f"Bearer {api_key}"))
        elif self.basic:
            self._headers.append(("Authorization", self.basic))
        self._transport: httpx2.BaseTransport | None = None
        self._target: httpx2.URL | None = None  # self.url parsed once, with the transport
        self._client_lock = threading.Lock()

    def _http(self) -> tuple[httpx2.BaseTransport, httpx2.URL]:
        # One keep-alive transport for the endpoint, made on first use: its URL is the
        # operator's, never a plugin's, so there is no address to re-check per request.
        # Requests go to the transport itself, not through an httpx Client: a client's
        # cookie jar (a urllib request built per answer to look for Set-Cookie), redirect
        # and auth machinery are nothing this POST wants, and cost it about a tenth of
        # its CPU (docs/performance.md, sixth round). Nothing is followed, nothing kept.
        with self._client_lock:
            if self._transport is None or self._target is None:
                import httpx2

                from wasmext.services.http.transport import bounded_transport

                self._transport = bounded_transport(8)
                self._target = httpx2.URL(self.url)
            return self._transport, self._target

    def close(self) -> None:
        """Close the kept-alive connections."""
        with self._client_lock:
            transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()

    def chat(self, req: ChatRequest) -> ChatAnswer:
        """Send a chat completion request and parse the answer."""
        import httpx2  # with the first request, not the host (`http.transport`)

        body: dict[str, Any] = {"model": req.model, "messages": list(req.messages)}
        if req.max_tokens is not None:
            body["max_tokens"] = req.max_tokens
        if req.temperature is not None:
            body["temperature"] = req.temperature
        if req.response_format is not None:
            body["response_format"] = dict(req.response_format)
        if req.tools:
            body["tools"] = [{"type": "function", "function": {
                "name": t["name"], "description": t.get("description", ""),
                "parameters": t.get("input_schema", {"type": "object"})}} for t in req.tools]
        deadline = time.monotonic() + req.timeout_s
        try:
            payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                                 allow_nan=False).encode()
            transport, target = self._http()
            with bounded(deadline) as extensions:
                request = httpx2.Request("POST", target, headers=self._headers,
                                         content=payload, extensions=extensions)
                resp = transport.handle_request(request)
                try:
                    raw = bytearray()
                    for chunk in resp.iter_raw():
                        raw += chunk
                        if passed(deadline):
                            raise httpx2.ReadTimeout("the answer ran past the deadline")
                        if len(raw) > self.max_answer_bytes:
                            raise ModelError(f"{self.shown}: answer over "
                                             f"{self.max_answer_bytes} bytes")
                finally:
                    resp.close()
                if passed(deadline):  # the watchdog's shutdown reads as an unframed body's end
                    raise httpx2.ReadTimeout("the answer ran past the deadline")
                if resp.status_code != 200:
                    raise ModelError(f"{self.shown}: HTTP {resp.status_code}")
            return parse_answer(loads_answer(bytes(raw)), req.model)
        except httpx2.TimeoutException:
            raise ModelError(f"{self.shown}: no answer within {req.timeout_s:.3g} s",
                             timed_out=True) from None
        except httpx2.HTTPError as exc:
            if passed(deadline):  # the watchdog shut the connection at the deadline
                raise ModelError(f"{self.shown}: no answer within {req.timeout_s:.3g} s",
                                 timed_out=True) from None
            raise ModelError(f"{self.shown}: {type(exc).__name__}: {clean(exc)}") from None
        except ValueError as exc:
            raise ModelError(f"{self.shown}: not a chat completion: {exc}") from None
