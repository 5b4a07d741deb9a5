"""Turn middleware editing the conversation: the reference's message events.

A `turn` layer passes `message_events` with its `next`: a list applied in
order to the turn's `messages` before the inner layers run. Each event is
checked first; one bad event refuses the whole list (`invalid`), so a layer
never leaves the conversation half edited. Messages are addressed by index
(wasmext messages carry no ids):

    {"type": "append",   "message": {"role", "content"}}
    {"type": "replace",  "index": i, "message": {"role", "content"}}
    {"type": "remove",   "index": i}
    {"type": "truncate", "keep": n}       # keep the last n (default 0: clear)
"""

from __future__ import annotations

from typing import Any

from wasmext.sandbox.hostcalls import OpError
from wasmext.text import clean

__all__ = ["MAX_EVENTS", "apply_message_events"]

MAX_EVENTS = 64
MAX_CONTENT = 262_144
ROLES = frozenset({"system", "user", "assistant", "tool"})


def _message(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("role") not in ROLES or \
            not isinstance(raw.get("content"), str) or len(raw["content"]) > MAX_CONTENT:
        raise OpError("invalid", "a message needs a role (system, user, assistant, tool) and "
                      f"a string content of at most {MAX_CONTENT} characters")
    return {"role": raw["role"], "content": raw["content"]}


def _index(raw: Any, size: int) -> int:
    if type(raw) is not int or not 0 <= raw < size:
        raise OpError("invalid", f"index {clean(repr(raw), 32)} is not a message (0..{size - 1})")
    return raw


def apply_message_events(messages: list[Any], events: Any) -> tuple[list[Any], list[str]]:
    """(the edited copy of `messages`, one trace line per event) or OpError."""
    if not isinstance(events, list) or len(events) > MAX_EVENTS:
        raise OpError("invalid", f"message_events must be a list of at most {MAX_EVENTS}")
    out, notes = list(messages), []
    for n, event in enumerate(events):
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "append":
            out.append(_message(event.get("message")))
            notes.append(f"append {out[-1]['role']} message #{len(out) - 1}")
        elif kind == "replace":
            i = _index(event.get("index"), len(out))
            out[i] = _message(event.get("message"))
            notes.append(f"replace message #{i}")
        elif kind == "remove":
            i = _index(event.get("index"), len(out))
            del out[i]
            notes.append(f"remove message #{i}")
        elif kind == "truncate":
            keep = event.get("keep", 0)
            if type(keep) is not int or keep < 0:
                raise OpError("invalid", "truncate's keep must be an int >= 0")
            dropped = max(0, len(out) - keep)
            out = out[dropped:]
            notes.append(f"truncate: {dropped} message(s) dropped, {len(out)} kept")
        else:
            raise OpError("invalid", f"message_events[{n}]: type must be append, replace, "
                          "remove or truncate")
    return out, notes
