"""Onion middleware: turn, step and tool_call layers around a core function.

The first plugin in order is the outermost layer. A layer runs the inner ones
with the host call `{"op": "next", ...changes}`, exactly once; the changes may
replace the kind's mutable fields. Time spent inside `next` belongs to the
inner layers: it is not charged to the calling plugin's host-call budget, and
its wall-clock deadline restarts when `next` returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wasmext.errors import HookAborted, MiddlewareError, WasmextError
from wasmext.hooks.messages import apply_message_events
from wasmext.sandbox import calltree
from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError

if TYPE_CHECKING:
    from wasmext.hooks.context import HookSession
    from wasmext.hooks.ordering import Entry

__all__ = ["KINDS", "MUTABLE", "install_next", "run_middleware"]

KINDS = ("turn", "step", "tool_call")
MUTABLE = {"turn": {"metadata"}, "step": {"metadata", "tools"},
           "tool_call": {"metadata", "args"}}

Core = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class _Frame:
    entry: Entry
    kind: str
    data: dict[str, Any]
    inner: Core
    called: bool = False
    result: dict[str, Any] | None = None
    error: WasmextError | None = None
    notes: list[str] = field(default_factory=list)  # message edits, for the trace


class _Frames(threading.local):
    def __init__(self) -> None:
        self.stack: list[_Frame] = []


_frames = _Frames()


def _op_next(ctx: CallContext, req: dict[str, Any]) -> Any:
    frame = _frames.stack[-1] if _frames.stack else None
    if frame is None or frame.entry.plugin_id != ctx.plugin_id:
        raise OpError("invalid", "next is only available inside a middleware hook")
    if frame.called:
        raise OpError("invalid", "next was already called in this layer")
    changes = {k: v for k, v in req.items() if k not in ("op", "message_events")}
    bad = sorted(set(changes) - MUTABLE[frame.kind])
    if bad:
        raise OpError("invalid", f"{frame.kind} middleware cannot change {bad[0]!r}")
    if "message_events" in req:  # hooks.messages: validated as a whole, then applied
        if frame.kind != "turn":
            raise OpError("invalid", "only turn middleware may edit the conversation")
        messages = frame.data.get("messages")
        changes["messages"], frame.notes = apply_message_events(
            messages if isinstance(messages, list) else [], req["message_events"])
    frame.called = True  # a refused request leaves the layer free to call next again
    started = time.perf_counter()
    try:
        with calltree.detached():  # the host's own inner layers: a tree of their own
            frame.result = frame.inner({**frame.data, **changes})
    except WasmextError as err:
        frame.error = err
        raise OpError("failed", f"the inner layers aborted: {err.reason}") from err
    finally:
        ctx.nested_seconds += time.perf_counter() - started
    return frame.result


def install_next(services: HostServices) -> None:
    services.register("next", _op_next)


def run_middleware(session: HookSession, kind: str, data: dict[str, Any], core: Core
                   ) -> dict[str, Any]:
    if kind not in KINDS:
        raise ValueError(f"middleware kind must be one of {KINDS}")
    entries = session.host.ordered(kind)
    events = _Events(session, kind, data)

    def layer(i: int, layer_data: dict[str, Any]) -> dict[str, Any]:
        if i == len(entries):
            return core(layer_data)
        frame = _Frame(entries[i], kind, layer_data, lambda d: layer(i + 1, d))
        _frames.stack.append(frame)
        try:
            answer = session.host.call(frame.entry, layer_data, session)
        finally:
            _frames.stack.pop()
        for note in frame.notes:
            session.trace.note(kind, "messages", note, frame.entry.plugin_id)
        if frame.error is not None:
            raise frame.error
        if answer is None:  # the layer failed; its policy said carry on without it
            return frame.result if frame.result is not None else layer(i + 1, layer_data)
        if not frame.called:
            _broken(session, frame, "returned without calling next")
            return layer(i + 1, layer_data)
        assert frame.result is not None
        if answer.changed:
            if isinstance(answer.value, dict):
                return answer.value
            session.trace.note(kind, "failed", "result is not a map; inner result kept",
                               frame.entry.plugin_id)
        return frame.result

    events.started()
    try:
        result = layer(0, data)
    except WasmextError as err:
        events.failed(err.reason)
        raise
    events.completed(result)
    return result


class _Events:
    """The runtime events of one turn, step or tool call (turn.*, step.*, tool.*)."""

    def __init__(self, session: HookSession, kind: str, data: dict[str, Any]) -> None:
        self.emit = session.host.observe.bus.emit_runtime
        self.kind = kind
        turn, step = str(data.get("turn_id", "")), data.get("step", 0)
        agent = {"turn_id": turn, "agent_name": "wasmext"}
        if kind == "turn":
            self.ids: dict[str, Any] = {**agent, "instance_key": session.id}
        elif kind == "step":
            self.ids = {**agent, "step_id": f"{turn}/{step}", "step_index": step}
        else:
            self.ids = {**agent, "step_id": f"{turn}/{step}",
                        "tool_call_id": str(data.get("call_id", "")),
                        "tool_name": str(data.get("tool", ""))}
        self.topic = "tool" if kind == "tool_call" else kind
        self.t0 = time.monotonic()

    def started(self) -> None:
        self.emit(f"{self.topic}.{'called' if self.topic == 'tool' else 'started'}", **self.ids)

    def failed(self, reason: str) -> None:
        self.emit(f"{self.topic}.failed", **self.ids, reason=reason)

    def completed(self, result: dict[str, Any]) -> None:
        ms = (time.monotonic() - self.t0) * 1000
        if self.kind == "turn":
            self.emit("turn.completed", **self.ids, step_count=result.get("steps", 0),
                      duration_ms=ms)
        elif self.kind == "step":
            self.emit("step.completed", **self.ids, duration_ms=ms,
                      tool_call_count=len(result.get("tool_calls") or []))
        else:
            self.emit("tool.completed", **self.ids, status=result.get("status"), duration_ms=ms)


def _broken(session: HookSession, frame: _Frame, why: str) -> None:
    host = session.host
    lp = host.plugins.get(frame.entry.plugin_id)
    err = MiddlewareError(f"{frame.kind} middleware {why}", plugin_id=frame.entry.plugin_id,
                          hook=frame.kind)
    session.trace.note(frame.kind, "failed", err.message, frame.entry.plugin_id)
    if lp is None:
        return
    host.record_fault(lp, frame.kind, err)
    if lp.failure == "closed":
        raise HookAborted(f"plugin {lp.id}: {err.message} and is fail-closed", cause=err,
                          plugin_id=lp.id, hook=frame.kind)
