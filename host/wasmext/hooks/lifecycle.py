"""Lifecycle hooks: session_start ... after_tool, with continue/abort semantics.

Each hook answers a map: `continue: false` aborts the operation (later hooks
are not called); `system_message`s concatenate in order; every other key is
extra output, visible to later hooks as `outputs` and returned to the app.
Output that is not such a map counts as `continue: true` and is logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wasmext.hooks.context import HookSession

__all__ = ["EVENTS", "LifecycleResult", "run_lifecycle"]

log = logging.getLogger("wasmext.lifecycle")

# event -> the fields its data carries besides event, session_id and outputs
EVENTS: dict[str, tuple[str, ...]] = {
    "session_start": (),
    "session_end": ("messages",),
    "before_agent": ("prompt", "context"),
    "after_agent": ("response", "tool_calls"),
    "before_model": ("messages", "model"),
    "after_model": ("response", "tokens"),
    "before_tool_selection": ("available_tools",),
    "before_tool": ("tool_name", "args"),
    "after_tool": ("tool_name", "result"),
}
_RESERVED = {"continue", "system_message", "stop_reason"}


@dataclass
class LifecycleResult:
    """What a lifecycle event's plugins decided: proceed or stop, and their messages."""

    event: str
    proceed: bool = True
    stop_reason: str | None = None
    stopped_by: str | None = None
    system_messages: list[str] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def system_message(self) -> str:
        """The plugins' system messages, one per line."""
        return "\n".join(self.system_messages)


def run_lifecycle(session: HookSession, event: str, fields: dict[str, Any]) -> LifecycleResult:
    """Run a lifecycle event's plugins in order until one stops it."""
    if event not in EVENTS:
        raise ValueError(f"unknown lifecycle event {event!r}; known: {', '.join(EVENTS)}")
    unknown = set(fields) - set(EVENTS[event])
    if unknown:
        raise ValueError(f"{event} takes {EVENTS[event]}, not {sorted(unknown)}")
    result = LifecycleResult(event)
    for entry in session.host.ordered(event):
        data = {"event": event, "session_id": session.id, "outputs": list(result.outputs),
                **{k: fields.get(k) for k in EVENTS[event]}}
        answer = session.host.call(entry, data, session)
        if answer is None or not answer.changed:
            continue
        out = answer.value
        if not isinstance(out, dict) or type(out.get("continue", True)) is not bool \
                or not isinstance(out.get("system_message", ""), str):
            log.error("plugin %s %s: invalid lifecycle output, treated as continue",
                      entry.plugin_id, event, extra={"plugin_id": entry.plugin_id})
            session.trace.note(event, "failed", "invalid output; treated as continue",
                               entry.plugin_id)
            continue
        if out.get("system_message"):
            result.system_messages.append(out["system_message"])
        extra = {k: v for k, v in out.items() if k not in _RESERVED}
        if extra:
            result.outputs.append({"plugin": entry.plugin_id, **extra})
        if out.get("continue", True) is False:
            result.proceed = False
            result.stopped_by = entry.plugin_id
            reason = out.get("stop_reason")
            result.stop_reason = reason if isinstance(reason, str) else \
                f"stopped by {entry.plugin_id}"
            session.trace.note(event, "abort", result.stop_reason, entry.plugin_id)
            break
    return result
