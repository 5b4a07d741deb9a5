"""A session: one conversation's identity, state, trace, and a method per hook kind.

Sessions are cheap and independent; several may run at once on one Host.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from wasmext.hooks.context import HookHost
from wasmext.hooks.transform import run_transform  # the hot path: imported once, not per call
from wasmext.ids import random_hex
from wasmext.observe import tracing
from wasmext.text import clean

if TYPE_CHECKING:
    from wasmext.hooks.extensions import ExtensionResult, Prompt, ToolGuidance
    from wasmext.hooks.lifecycle import LifecycleResult
    from wasmext.hooks.ordering import Entry
    from wasmext.hooks.pipeline import PipelineResult, Policy
    from wasmext.hooks.transform import TransformResult

__all__ = ["Session", "SessionHost", "Trace", "TraceEvent"]

# Hooks whose `meta.context` also lists the tool catalog (names).
TOOL_HOOKS = frozenset({"turn", "step", "tool_call", "before_model", "before_tool"})


class SessionHost(HookHost, Protocol):
    """The host a session runs on (a `Host`)."""

    def session_ended(self, session_id: str) -> None:
        """Drop what the host keeps for one session (its session-scoped state)."""

    def keeps_session_state(self) -> bool:
        """Whether ending a session talks to a state store (I/O) rather than nothing."""


@dataclass(frozen=True)
class TraceEvent:
    """What one plugin did in one hook call (or a note from the host)."""

    hook: str
    plugin_id: str | None
    outcome: str  # changed, unchanged, stop, failed, skipped, or a host note
    detail: str | None = None
    time: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        """The event as a plain dict."""
        return {"hook": self.hook, "plugin": self.plugin_id, "outcome": self.outcome,
                "detail": self.detail}


_HOOK_NAMES: dict[str, str] = {}  # hook name -> its cleaned form (a few names, many events)


_now = time.time
_READING = threading.Lock()  # reading a trace is rare: one lock for every trace


def _hook_name(hook: str) -> str:
    cleaned = _HOOK_NAMES.get(hook)
    if cleaned is None:
        cleaned = clean(hook, 128)
        if len(_HOOK_NAMES) < 1024:  # guest-chosen names: the table stays bounded
            _HOOK_NAMES[hook] = cleaned
    return cleaned


class Trace:
    """The ordered record of a session, for `wasmext run` and for debugging.

    A note is kept as a plain tuple and becomes a `TraceEvent` when `events` is
    read: every plugin call adds one, and a frozen dataclass costs a hook call
    several times what a tuple does.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._notes: list[tuple[str, str | None, str, str | None, float]] = []
        # Made on the first read: most sessions' traces are never read, and each object
        # a session keeps is one more for every full garbage collection to scan.
        self._events: list[TraceEvent] | None = None

    @property
    def events(self) -> list[TraceEvent]:
        """Every note so far, oldest first (at most `limit`)."""
        notes = self._notes
        with _READING:  # two readers never make the same event twice
            events = self._events
            if events is None:
                events = self._events = []
            if len(events) < len(notes):
                events.extend(TraceEvent(*note) for note in notes[len(events):len(notes)])
        return events

    def add(self, entry: Entry, outcome: str, detail: str | None) -> None:
        """Note the outcome of calling one entry (up to the trace's limit)."""
        notes = self._notes
        if len(notes) < self.limit:  # a detail may quote a plugin: one inert line
            notes.append((_hook_name(entry.hook), entry.plugin_id, outcome,
                          None if detail is None else clean(detail), _now()))

    def note(self, hook: str, outcome: str, detail: str | None = None,
             plugin_id: str | None = None) -> None:
        """Note an event of a hook, optionally naming a plugin (up to the trace's limit)."""
        if len(self._notes) < self.limit:
            self._notes.append((_hook_name(hook), plugin_id, outcome,
                                None if detail is None else clean(detail), _now()))


class Session:
    """Create with `Host.session()`; the methods run one hook kind each."""

    def __init__(self, host: SessionHost, session_id: str, state: dict[str, Any]) -> None:
        self.host = host
        self.id = session_id
        self.state = state
        self.trace = Trace()
        self.messages: list[dict[str, Any]] = []
        self.system_messages: list[str] = []
        # What a minor-1 plugin gets as `meta.context` in every hook call (SPEC 4.1):
        # the application may set tenant_id and agent_name, the agent driver turn_id.
        self.context: dict[str, Any] = {"session_id": session_id, "trace_id": random_hex(),
                                        "turn_id": None, "tenant_id": None, "agent_name": None}
        # Whose output-extension activations `#name` resolves to (hooks.activations);
        # kept out of `context`, so plugins are not told who the user is.
        self.user_id: str | None = None
        # The session's span (observe.tracing) and a Context holding it: the parent of
        # its hook calls' spans wherever they run. None while tracing is off.
        self.otel_context: Any = None
        self._span: Any = None

    def open_span(self) -> Any:
        """Start the session's span (tracing on) and return its Context; `end` ends it."""
        traced = tracing.ACTIVE
        if traced is None or self._span is not None:
            return self.otel_context
        self._span = traced.start("wasmext.session", {"wasmext.session_id": tracing.text(self.id)})
        self.otel_context = traced.context_of(self._span)
        trace_id = self._span.get_span_context().trace_id
        if trace_id:  # plugins' meta.context names the trace an operator will look up
            self.context["trace_id"] = format(trace_id, "032x")
        return self.otel_context

    def close_span(self, error: str | None = None, *, end: bool = True) -> None:
        """Mark the session's span failed with `error` (cleaned), and end it unless not
        `end` (the session's own `end` will)."""
        traced, span = tracing.ACTIVE, self._span
        if span is None:
            return
        if error is not None and traced is not None:
            traced.failed(span, error)
        if end:
            self._span = None
            span.end()

    def hook_context(self, hook: str) -> dict[str, Any]:
        """`context` for one hook call: the session's, plus the tool names where relevant."""
        context = dict(self.context)
        if hook in TOOL_HOOKS:
            registry = getattr(self.host, "tools", None)
            context["tools"] = sorted(getattr(registry, "tools", {}))
        return context

    def start(self) -> LifecycleResult:
        """Emit session.started and run the session_start plugins; keeps their system messages."""
        self._started = time.monotonic()
        self.open_span()
        self.host.observe.bus.emit_runtime("session.started", session_id=self.id)
        try:
            result = self.lifecycle("session_start")
        except BaseException as exc:  # aborted: no session_end will end the span
            self.close_span(f"{type(exc).__name__}: {exc}")
            raise
        self.system_messages.extend(result.system_messages)
        return result

    def end(self) -> LifecycleResult:
        """Run the session_end plugins, delete the session's state and emit session.ended."""
        try:
            result = self.lifecycle("session_end", messages=self.messages)
            self.host.session_ended(self.id)  # the session's state goes with it
        except BaseException as exc:
            self.close_span(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.close_span()
        self.host.observe.bus.emit_runtime(
            "session.ended", session_id=self.id,
            duration_ms=(time.monotonic() - getattr(self, "_started", time.monotonic())) * 1000)
        return result

    # -- transforms and tags ---------------------------------------------------------

    def on_input_messages(self, messages: Sequence[Mapping[str, Any]]) -> TransformResult:
        """Pass the input messages through the on_input_messages plugins."""
        return run_transform(self, "on_input_messages", [dict(m) for m in messages])

    def on_plain_text(self, text: str) -> TransformResult:
        """Pass plain text through the on_plain_text plugins."""
        return run_transform(self, "on_plain_text", text)

    def on_llm_output(self, text: str) -> TransformResult:
        """Pass the model's output through the on_llm_output plugins."""
        return run_transform(self, "on_llm_output", text)

    def process_tags(self, text: str) -> str:
        """Replace the text's tags by their on_tag plugins' answers."""
        from wasmext.hooks.tags import run_tags

        return run_tags(self, text)

    # -- middleware, lifecycle, pipeline ------------------------------------------------

    def middleware(self, kind: str, data: dict[str, Any],
                   core: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Run `core(data)` wrapped in the `kind` middleware layers (turn, step, tool_call)."""
        from wasmext.hooks.middleware import run_middleware

        return run_middleware(self, kind, data, core)

    def lifecycle(self, event: str, **fields: Any) -> LifecycleResult:
        """Run a lifecycle event's plugins."""
        from wasmext.hooks.lifecycle import run_lifecycle

        return run_lifecycle(self, event, fields)

    def pipeline(self, policy: Policy, payload: str,
                 context: Mapping[str, Any] | None = None,
                 provider: Callable[[dict[str, Any]], dict[str, Any]] | None = None
                 ) -> PipelineResult:
        """Run a pipeline policy's stages on the payload."""
        from wasmext.hooks.pipeline import run_pipeline

        return run_pipeline(self, policy, payload, dict(context or {}), provider)

    # -- output extensions, prompt, tool guidance -------------------------------------

    def output_extensions(self, query: str, answer: str,
                          context: Mapping[str, Any] | None = None
                          ) -> tuple[str, list[ExtensionResult]]:
        """Strip `#name[:param]` requests from `query`; run them on `answer`.

        `context` adds what the application knows of the turn (provider, model,
        tokens, tools_used, child_results, ...) to the extensions' context."""
        from wasmext.hooks.extensions import run_output_extensions

        return run_output_extensions(self, query, answer, context)

    def prompt(self, system: str, user: str, tags: Sequence[str] = (),
               context: Mapping[str, Any] | None = None) -> Prompt:
        """Assemble the system and user prompt with the plugins' additions."""
        from wasmext.hooks.extensions import assemble_prompt

        return assemble_prompt(self, system, user, tags, dict(context or {}))

    def tool_guidance(self, tools: Sequence[str]) -> ToolGuidance:
        """The plugins' advice on the available tools."""
        from wasmext.hooks.extensions import tool_guidance

        return tool_guidance(self, tools)
