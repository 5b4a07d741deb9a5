"""Onion middleware: turn, step and tool_call layers around a core function.

The first plugin in order is the outermost layer. A layer runs the inner ones
with the host call `{"op": "next", ...changes}`, exactly once; the changes may
replace the kind's mutable fields. Time spent inside `next` belongs to the
inner layers: it is not charged to the calling plugin's host-call budget, and
its wall-clock deadline restarts when `next` returns.

A chain runs in the call tree it was started in (`calltree.resumed`): the
application's calls in none, so each layer and the core are budgeted on their
own; a plugin's `tool.call` in that plugin's, so every layer, the inner layers
`next` runs and the tool itself draw from the calling plugin's deadline and
host calls, and no layer outlives it.

A tool_call layer may change the call's `metadata`, but not its `caller` (the
plugin the host says asked; none for the application's calls): whatever a layer
passes to `next`, the inner layers and the tool see the caller the chain began with.
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
from wasmext.text import clean

if TYPE_CHECKING:
    from wasmext.hooks.context import HookSession
    from wasmext.hooks.ordering import Entry

__all__ = ["KINDS", "MUTABLE", "RESULT_SHAPE", "install_next", "run_middleware", "shape_problem"]

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
    called_again: bool = False  # the layer asked for next a second time (refused)
    result: dict[str, Any] | None = None
    error: WasmextError | None = None
    notes: list[str] = field(default_factory=list)  # message edits, for the trace
    # The call tree the chain began in: the calling plugin's for its `tool.call`,
    # None for the application's own call.
    outer: calltree.Frame | None = None


class _Frames(threading.local):
    def __init__(self) -> None:
        self.stack: list[_Frame] = []


_frames = _Frames()


class _Turns(threading.local):
    def __init__(self) -> None:
        self.stack: list[_Events] = []


_turns = _Turns()  # the turns running on this thread, innermost last
DEFAULT_AGENT_NAME = "wasmext"  # when the application named no agent


def _op_next(ctx: CallContext, req: dict[str, Any]) -> Any:
    frame = _frames.stack[-1] if _frames.stack else None
    if frame is None or frame.entry.plugin_id != ctx.plugin_id:
        raise OpError("invalid", "next is only available inside a middleware hook")
    if frame.called:
        frame.called_again = True
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
            messages if isinstance(messages, list) else [], req["message_events"],
            frame.entry.plugin_id)
    if frame.kind == "tool_call" and "metadata" in changes:
        changes["metadata"] = _keeping_caller(frame.data.get("metadata"), changes["metadata"])
    frame.called = True  # a refused request leaves the layer free to call next again
    started = time.perf_counter()
    try:
        with calltree.resumed(frame.outer):  # the tree the chain began in
            frame.result = frame.inner({**frame.data, **changes})
    except WasmextError as err:
        frame.error = err
        raise OpError("failed", f"the inner layers aborted: {err.reason}") from err
    finally:
        ctx.nested_seconds += time.perf_counter() - started
    return frame.result


def _keeping_caller(given: Any, changed: Any) -> Any:
    """A layer's new tool_call metadata with `caller` as the chain began: the host names
    the plugin behind a call, and no layer (any plugin may be one, granted nothing) makes
    the inner ones see another plugin's name, or none (the application's call)."""
    caller = given.get("caller") if isinstance(given, dict) else None
    if not isinstance(changed, dict):
        return changed if caller is None else {"caller": caller}
    kept = {k: v for k, v in changed.items() if k != "caller"}
    if caller is not None:
        kept["caller"] = caller
    return kept


def install_next(services: HostServices) -> None:
    """Register the `next` host call that middleware layers use."""
    services.register("next", _op_next)


def run_middleware(session: HookSession, kind: str, data: dict[str, Any], core: Core
                   ) -> dict[str, Any]:
    """Run the middleware chain of a kind around the core function."""
    if kind not in KINDS:
        raise ValueError(f"middleware kind must be one of {KINDS}")
    entries = session.host.ordered(kind)
    events = _Events(session, kind, data)
    outer = calltree.current()

    def layer(i: int, layer_data: dict[str, Any]) -> dict[str, Any]:
        if i == len(entries):
            return core(layer_data)
        frame = _Frame(entries[i], kind, layer_data, lambda d: layer(i + 1, d), outer=outer)
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
        if frame.called_again:  # its answer is not trusted: the inner result stands
            _broken(session, frame, "called next more than once; inner result kept")
            return frame.result
        if answer.changed:
            problem = shape_problem(kind, answer.value, frame.result)
            if problem is None:
                return answer.value  # type: ignore[no-any-return]
            _broken(session, frame, f"answered a result that {problem}; inner result kept")
        return frame.result

    events.started()
    turns = _turns.stack
    if kind == "step" and turns:
        turns[-1].steps += 1
    if kind == "turn":
        turns.append(events)
    try:
        result = layer(0, data)
    except WasmextError as err:
        events.failed(err.reason)
        raise
    finally:
        if kind == "turn":
            turns.pop()
    events.completed(result)
    return result


class _Events:
    """The runtime events of one turn, step or tool call (turn.*, step.*, tool.*)."""

    def __init__(self, session: HookSession, kind: str, data: dict[str, Any]) -> None:
        self.emit = session.host.observe.bus.emit_runtime
        self.kind = kind
        self.steps = 0  # a turn's step layers run inside it (counted by `_turns`)
        turn, step = str(data.get("turn_id", "")), data.get("step", 0)
        context = getattr(session, "context", None)  # the app names its agent there
        name = context.get("agent_name") if isinstance(context, dict) else None
        agent = {"turn_id": turn, "agent_name": str(name) if name else DEFAULT_AGENT_NAME}
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
            self.emit("turn.completed", **self.ids, step_count=self.steps, duration_ms=ms)
        elif self.kind == "step":
            self.emit("step.completed", **self.ids, duration_ms=ms,
                      tool_call_count=len(result.get("tool_calls") or []))
        else:
            self.emit("tool.completed", **self.ids, status=result.get("status"), duration_ms=ms)


# What each kind's result must hold, whatever the layers do to it.
RESULT_SHAPE: dict[str, dict[str, type | tuple[type, ...]]] = {
    "turn": {"response": str, "finish_reason": str},
    "step": {"tool_calls": list},
    "tool_call": {"status": str},
}
_JSON_KINDS: tuple[type | tuple[type, ...], ...] = (
    bool, (int, float), str, list, dict, type(None))


def _json_kind(value: Any) -> type | tuple[type, ...] | None:
    for kind in _JSON_KINDS:
        if isinstance(value, kind):
            return kind
    return None


def shape_problem(kind: str, answer: Any, inner: dict[str, Any]) -> str | None:
    """Why a layer's `answer` cannot replace the `inner` result of a `kind`, or None: it
    must be a map holding the kind's fields (RESULT_SHAPE), and each field the inner
    result has keeps its JSON type (a `response` stays a string, `tool_calls` a list)."""
    if not isinstance(answer, dict):
        return "is not a map"
    for key, typ in RESULT_SHAPE.get(kind, {}).items():
        if key in inner and key not in answer:
            return f"lacks {key!r}"
        if key in answer and not isinstance(answer[key], typ):
            return f"has a {key!r} of the wrong type"
    for key, value in inner.items():
        if key in answer and value is not None and answer[key] is not None and \
                _json_kind(answer[key]) != _json_kind(value):
            return f"changes the type of {clean(str(key), 64)!r}"
    return None


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
