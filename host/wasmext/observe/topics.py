"""Event topics and patterns, grants, the standard runtime events, the bus's errors.

The pure part of the event bus (no threads, no state); `wasmext.observe.events`
re-exports all of it. See docs/events-and-metrics.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from wasmext.errors import (
    BusClosed,
    CascadeLimit,
    EventDenied,
    EventError,
    InvalidTopic,
    RateLimited,
    TooManySubscriptions,
)
from wasmext.text import clean

__all__ = [
    "APP", "HOST", "OUTCOMES", "RESERVED_NAMESPACES", "RUNTIME_EVENTS", "BusClosed",
    "CascadeLimit", "EventDenied", "EventError", "InvalidTopic", "Predicate", "RateLimited",
    "TooManySubscriptions",
    "check_pattern", "check_topic", "grants_predicate", "is_reserved", "pattern_covers",
    "runtime_event", "topic_matches",
]

# The standard runtime events and their payload fields (all present in every payload).
# `timestamp` is Unix time in milliseconds (int); `duration_ms` a float in milliseconds.
_TURN = ("turn_id", "agent_name", "instance_key")
_STEP = ("step_id", "step_index", "turn_id", "agent_name")
_TOOL = ("tool_call_id", "tool_name", "step_id", "turn_id", "agent_name")
_T = ("timestamp",)
RUNTIME_EVENTS: dict[str, tuple[str, ...]] = {
    "turn.started": (*_TURN, *_T),
    "turn.completed": (*_TURN, "step_count", "duration_ms", *_T),
    "turn.failed": (*_TURN, "reason", *_T),
    "step.started": (*_STEP, *_T),
    "step.completed": (*_STEP, "tool_call_count", "duration_ms", *_T),
    "step.failed": (*_STEP, "reason", *_T),
    "tool.called": (*_TOOL, *_T),
    "tool.completed": (*_TOOL, "status", "duration_ms", *_T),
    "tool.failed": (*_TOOL, "reason", *_T),
    "session.started": ("session_id", *_T),
    "session.ended": ("session_id", "duration_ms", *_T),
    "plugin.loaded": ("plugin_id", "version", *_T),
    "plugin.unloaded": ("plugin_id", *_T),
    "plugin.faulted": ("plugin_id", "hook", "reason", *_T),
    "extension.start": ("session_id", "turn_id", "name", "extension", "param", *_T),
    "extension.result": ("session_id", "name", "param", "plugin_id", "success", "error",
                         "content_type", "duration_ms", "usage", "cost", "turn_id",
                         "extension", "output_target", *_T),
    "extension.results": ("session_id", "turn_id", "results", *_T),
    "extension.usage": ("session_id", "turn_id", "input_tokens", "output_tokens", "cost",
                        "count", "turn_input_tokens", "turn_output_tokens", *_T),
}
# Only the host emits here: a plugin cannot forge runtime events, whatever its grants.
RESERVED_NAMESPACES = frozenset({"turn", "step", "tool", "session", "extension"})

_SEGMENT = r"[A-Za-z0-9_-]{1,64}"
_TOPIC_RE = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT}){{0,15}}")
MAX_TOPIC_CHARS = 255
HOST = "_host"  # the emitter label of the host and the embedding app (never a plugin id)
APP = "_app"  # the subscriber label of Python callbacks
OUTCOMES = ("emitted", "delivered", "dropped", "failed", "rate_limited", "denied",
            "cascade_limit", "skipped", "discarded")

Predicate = Callable[[str, str], bool]


def check_topic(topic: object) -> str:
    """Return the topic if it is valid; else InvalidTopic."""
    if not (isinstance(topic, str) and len(topic) <= MAX_TOPIC_CHARS
            and _TOPIC_RE.fullmatch(topic)):
        # The topic is the plugin's: shown cleaned and cut, since this message reaches
        # the load errors and the log (a 200 KB pattern made a 200 KB log line).
        shown = repr(clean(topic, 80)) if isinstance(topic, str) else type(topic).__name__
        raise InvalidTopic(f"bad topic {shown}: dot-separated segments of [A-Za-z0-9_-], "
                           f"at most {MAX_TOPIC_CHARS} characters")
    return topic


def check_pattern(pattern: object) -> str:
    """Return the pattern if valid: a topic, a topic with ".*", or "*"."""
    if isinstance(pattern, str) and pattern.endswith(".*"):
        return check_topic(pattern[:-2]) + ".*"
    return "*" if pattern == "*" else check_topic(pattern)


def topic_matches(pattern: str, topic: str) -> bool:
    """Whether the pattern matches the topic."""
    return pattern in ("*", topic) or (pattern.endswith(".*") and topic.startswith(pattern[:-1]))


def pattern_covers(grant: str, pattern: str) -> bool:
    """True if every topic `pattern` matches is also matched by `grant`."""
    return grant == pattern or (grant.endswith("*") and pattern != "*"
                                and topic_matches(grant, pattern))


def grants_predicate(table: Mapping[str, Iterable[str]]) -> Predicate:
    """A predicate from {plugin_id: [granted patterns]}; an absent plugin is granted nothing."""
    frozen = {pid: tuple(check_pattern(p) for p in pats) for pid, pats in table.items()}
    return lambda pid, pattern: any(pattern_covers(g, pattern) for g in frozen.get(pid, ()))


def is_reserved(topic: str) -> bool:
    """Whether the topic is the runtime's own (a reserved namespace or runtime event)."""
    return topic.split(".", 1)[0] in RESERVED_NAMESPACES or topic in RUNTIME_EVENTS


def runtime_event(topic: str, **fields: Any) -> dict[str, Any]:
    """The payload of a standard runtime event; `timestamp` is filled in when absent."""
    names = RUNTIME_EVENTS.get(topic)
    if names is None:
        raise ValueError(f"{topic!r} is not a standard runtime event")
    fields.setdefault("timestamp", int(time.time() * 1000))
    missing = [n for n in names if n not in fields]
    extra = sorted(set(fields) - set(names))
    if missing or extra:
        raise ValueError(f"{topic}: missing fields {missing}, unknown fields {extra}")
    return {n: fields[n] for n in names}
