"""The worker's side of one pipeline stage call: the request's budget, the plugin call.

A request's headers carry what it may spend (`Budget`): its deadline, the host calls
its caller's call tree has left, and the idempotency key every attempt of one call
shares. `call_stage` drops a request whose deadline passed unrun; one that runs gets
the rest of that time and those host calls as the root of its call tree, and its
state commit is made at most once per key (a `services.state.Once` on that root frame,
or `applying` when there is none). The request is decoded once, runs through
`Host.try_call` (the plugin's sandbox, limits, grants and state transaction, as
in-process) and its answer is encoded once. A caller that reads denial notices
(`Wasmext-Notices`) gets the plugin's (`Budget.denials`, sent in the answer's
`Wasmext-Denials` header: `cluster.notices`).
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import TYPE_CHECKING, Any

from wasmext.cluster.contract import (
    CALL_ID_HEADER,
    CALLS_LEFT_HEADER,
    DEADLINE_HEADER,
    NOTICES_HEADER,
    NOTICES_VERSION,
    ExtRequest,
    ProviderRequest,
    decode,
    encode,
)
from wasmext.cluster.endpoints import Stage
from wasmext.cluster.mapping import (
    data_from_provider_request,
    data_from_request,
    provider_response,
    stage_response,
    verdict_from_answer,
)
from wasmext.observe import tracing
from wasmext.sandbox import calltree
from wasmext.sandbox.hostcalls import DenialSeen, unwatch_denials, watch_denials
from wasmext.services.state import Once, applying
from wasmext.session import TOOL_HOOKS

if TYPE_CHECKING:
    from wasmext.hooks.ordering import Entry
    from wasmext.host import Host

__all__ = ["Budget", "WireSession", "call_stage", "session_id"]

_monotonic, _time = time.monotonic, time.time
_PLAIN_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def _plain(text: str) -> bool:
    """Letters and digits only, ASCII, at most 128 (a caller's random ids): its bytes'
    `isalnum` reads a table per byte, the str's a Unicode lookup per character."""
    return text.isascii() and len(text) <= 128 and text.encode().isalnum()


def session_id(trace_id: str) -> str:
    """The trace id as the call's session id, or its digest when it is long or odd
    (it comes off the network and becomes a state scope and a log field)."""
    # Letters and digits only (a caller's random ids): plain without the pattern's scan.
    if _plain(trace_id) or _PLAIN_ID.fullmatch(trace_id):
        return trace_id
    return "trace-" + hashlib.sha256(trace_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class _Unread:
    """The trace of a remote call's session: it lives for one call and nobody reads it."""

    __slots__ = ()

    def add(self, entry: Entry, outcome: str, detail: str | None) -> None:
        """Nothing to keep."""

    def note(self, hook: str, outcome: str, detail: str | None = None,
             plugin_id: str | None = None) -> None:
        """Nothing to keep."""


_UNREAD = _Unread()


class WireSession:
    """The session one remote stage call runs in: what `Host.try_call` reads of a
    `Session` (its id, an unread trace, the minor-1 hook context), made per request
    without the rest (trace list and lock, message lists, a context made up front).
    Its id is the request's trace id (or that id's digest, `session_id`), which is also
    the context's `trace_id`; `tenant_id` is the request's, as the caller's run had it."""

    __slots__ = ("_state", "host", "id", "tenant_id")
    trace: _Unread = _UNREAD  # what try_call notes goes nowhere
    otel_context: Any = None  # the worker's span, when traced, is the current one

    def __init__(self, host: Host, session_id: str, tenant_id: str | None = None) -> None:
        self.host, self.id = host, session_id
        # Off the wire, for the plugin only: a printable id of at most 128 characters.
        self.tenant_id = tenant_id if tenant_id is not None and len(tenant_id) <= 128 \
            and tenant_id.isprintable() else None
        self._state: dict[str, Any] | None = None

    @property
    def state(self) -> dict[str, Any]:
        """The application's state of the session: empty (made when first read)."""
        if self._state is None:
            self._state = {}
        return self._state

    def hook_context(self, hook: str) -> dict[str, Any]:
        """`context` for one hook call: a fresh `Session`'s keys, with the request's
        trace id (its digest when long or odd) and tenant."""
        context: dict[str, Any] = {"session_id": self.id, "trace_id": self.id,
                                   "turn_id": None, "tenant_id": self.tenant_id,
                                   "agent_name": None}
        if hook in TOOL_HOOKS:
            context["tools"] = sorted(getattr(getattr(self.host, "tools", None), "tools", {}))
        return context


class Budget:
    """What a request may spend: its deadline (time.monotonic), host calls, idempotency key;
    and whether its caller reads the call's denials (`notices`; `denials`: those seen).
    `arrived`: when it was read (time.monotonic), the instant `late` compares."""

    __slots__ = ("arrived", "calls_left", "deadline", "denials", "headers", "key", "notices")

    def __init__(self, headers: dict[str, str] | None) -> None:
        hdrs = headers or {}
        # `contract.deadline_of`, inline (a call and a clock read less per request): the
        # clock read here is also the arrival `late` compares with.
        self.arrived = now = _monotonic()
        raw = hdrs.get(DEADLINE_HEADER)
        self.deadline = now + (int(raw) / 1000 - _time()) if raw is not None \
            and raw.isascii() and raw.isdigit() and len(raw) <= 16 else None
        raw = hdrs.get(CALLS_LEFT_HEADER)
        self.calls_left = int(raw) if raw is not None and raw.isascii() and raw.isdigit() \
            and len(raw) <= 9 else None
        key = hdrs.get(CALL_ID_HEADER)
        # A caller's random hex id is its own session id: no call for the usual case.
        self.key = key if key is None or (key.isascii() and len(key) <= 128
                                          and key.encode().isalnum()) else session_id(key)
        self.headers = hdrs  # the caller's trace context (traceparent), read when traced
        asked = hdrs.get(NOTICES_HEADER)  # the versions the caller reads: "1", or "1,2"
        self.notices = asked is not None and (asked == NOTICES_VERSION
                                              or NOTICES_VERSION in asked.split(","))
        self.denials: list[DenialSeen] | None = None

    def late(self) -> bool:
        """Whether the caller had given this attempt up when it arrived."""
        return self.deadline is not None and self.arrived >= self.deadline

    def expired(self) -> bool:
        """Whether the caller has given this attempt up."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def frame(self) -> calltree.Frame | None:
        """The caller's budget as the root of the call tree the plugin call runs in."""
        if self.deadline is None and self.calls_left is None:
            return None
        return calltree.Frame(self.deadline if self.deadline is not None else float("inf"),
                              self.calls_left if self.calls_left is not None else 1 << 30,
                              None)


def call_stage(host: Host, stage: Stage, raw: bytes, encoding: str, budget: Budget,
               worker: str) -> tuple[bytes | None, bool]:
    """(the encoded answer, whether its state commit had already been applied), or
    (None, False) when the request expired before it could run. A plugin's failure or
    a request that is not the contract raises (RuntimeError, ContractError)."""
    if budget.expired():  # it waited in the pool's queue past the caller's deadline
        return None, False
    traced = tracing.ACTIVE
    if traced is None:
        return _run(host, stage, raw, encoding, budget)
    # A child of the caller's span (W3C traceparent in the request's headers).
    with traced.span(f"wasmext.worker {stage.kind}", {
            "wasmext.plugin_id": tracing.text(stage.plugin_id), "wasmext.stage": stage.kind,
            "wasmext.worker": tracing.text(worker), "messaging.system": "nats",
            "messaging.destination.name": tracing.text(stage.subject)},
            kind="server", parent=traced.extract(budget.headers)):
        return _run(host, stage, raw, encoding, budget)


def _run(host: Host, stage: Stage, raw: bytes, encoding: str, budget: Budget
         ) -> tuple[bytes, bool]:
    kind, peer = stage.kind, stage.peer
    request: ExtRequest | ProviderRequest
    if kind == "provider":
        request = decode(raw, ProviderRequest, encoding, peer=peer)
        data = data_from_provider_request(request)
    else:
        request = decode(raw, ExtRequest, encoding, peer=peer)
        data = data_from_request(request)
    trace_id = request.trace_id
    session = WireSession(host, trace_id if _plain(trace_id) else session_id(trace_id),
                          request.tenant_id)
    root = budget.frame()
    key = budget.key
    once: Once | None = None
    if root is not None:
        if key is not None:
            # The usual request (a deadline, a key) holds its idempotency record in the
            # root frame it pushes anyway; `applying` only when it has no frame.
            once = root.once = Once(key, root)
        calltree.push(root)
    # The plugin's denials, for a caller that reads them: two plain calls (a context
    # manager cost a microsecond a request), none for a caller that does not.
    watched = watch_denials(stage.plugin_id) if budget.notices else None
    try:
        if key is None or once is not None:
            answer, error = host.try_call(stage.plugin_id, kind, data, session)
        else:
            with applying(key) as once:
                answer, error = host.try_call(stage.plugin_id, kind, data, session)
    finally:
        if watched is not None:
            unwatch_denials(watched[1])
            budget.denials = watched[0] or None
        if root is not None:
            calltree.pop()
        # No session end ever comes over the wire: session-scoped state lives for
        # one remote call (share state across calls in a plugin or tenant scope).
        host.session_ended(session.id)
    if error is not None or answer is None:
        raise RuntimeError(error or "no answer")
    out: Any
    if kind == "validator":
        out = verdict_from_answer(answer.value) if answer.changed else None
    elif kind == "provider":
        out = provider_response(stage.plugin_id, answer.value) if answer.changed else None
    else:
        assert isinstance(request, ExtRequest)
        out = stage_response(request, answer.value, answer.changed)
    if out is None:
        raise RuntimeError(f"invalid {kind} answer")
    return encode(out, encoding), once is not None and once.duplicate
