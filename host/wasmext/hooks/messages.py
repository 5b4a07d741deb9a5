"""Turn middleware editing the conversation: the reference's message events.

A `turn` layer passes `message_events` with its `next`: a list applied in
order to the turn's `messages` before the inner layers run. Each event is
checked first; one bad event refuses the whole list (`invalid`), so a layer
never leaves the conversation half edited. A message carries an `id`, its
`source` ({"type": "user" | "assistant" | "tool" | "system" | "extension", ...})
and `created_at` (ISO 8601, UTC) beside its chat fields; an edit addresses a
message by `target_id` (the seed's name) or by `index`:

    {"type": "append",   "message": {"role", "content"}}
    {"type": "replace",  "target_id": id | "index": i, "message": {"role", "content"}}
    {"type": "remove",   "target_id": id | "index": i}
    {"type": "truncate", "keep": n}       # keep the last n (default 0: clear)
    {"type": "truncate", "target_id": id} # keep that message and those after it

The seed's bare `{"type": "truncate"}` clears the conversation; `keep` and
`target_id` cut only its older part (a context window kept to its recent end).

A message a layer appends gets a new id and the source {"type": "extension",
"extension_name": <plugin id>}; a replaced message keeps its id.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from wasmext.sandbox.hostcalls import OpError
from wasmext.text import clean

__all__ = ["MAX_EVENTS", "WIRE_KEYS", "apply_message_events", "new_message", "wire"]

# The chat-completions fields of a message: what a model endpoint is sent.
WIRE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})


def new_message(role: str, content: str, source: dict[str, Any], **chat: Any
                ) -> dict[str, Any]:
    """A conversation message: its chat fields plus an id, its source and its time."""
    return {"id": f"msg-{uuid.uuid4().hex[:20]}", "role": role, "content": content, **chat,
            "source": source,
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")}


def wire(message: dict[str, Any]) -> dict[str, Any]:
    """`message` as a model endpoint takes it (the chat fields only)."""
    return {k: v for k, v in message.items() if k in WIRE_KEYS}

MAX_EVENTS = 64
MAX_CONTENT = 262_144
ROLES = frozenset({"system", "user", "assistant", "tool"})


def _message(raw: Any, editor: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or raw.get("role") not in ROLES or \
            not isinstance(raw.get("content"), str) or len(raw["content"]) > MAX_CONTENT:
        raise OpError("invalid", "a message needs a role (system, user, assistant, tool) and "
                      f"a string content of at most {MAX_CONTENT} characters")
    return new_message(raw["role"], raw["content"],
                       {"type": "extension", "extension_name": editor})


def _index(event: dict[str, Any], out: list[Any]) -> int:
    """The message an edit addresses: by `target_id`, else by `index`."""
    size = len(out)
    if "target_id" in event:
        target = event["target_id"]
        for i, message in enumerate(out):
            if isinstance(message, dict) and isinstance(target, str) and \
                    message.get("id") == target:
                return i
        raise OpError("invalid", f"no message with id {clean(repr(target), 48)}")
    raw = event.get("index")
    if type(raw) is not int or not 0 <= raw < size:
        raise OpError("invalid", f"index {clean(repr(raw), 32)} is not a message (0..{size - 1})")
    return raw


def apply_message_events(messages: list[Any], events: Any, editor: str = ""
                         ) -> tuple[list[Any], list[str]]:
    """(the edited copy of `messages`, one trace line per event) or OpError; `editor`:
    the plugin whose layer asked (the source of the messages it adds)."""
    if not isinstance(events, list) or len(events) > MAX_EVENTS:
        raise OpError("invalid", f"message_events must be a list of at most {MAX_EVENTS}")
    out, notes = list(messages), []
    for n, event in enumerate(events):
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "append":
            out.append(_message(event.get("message"), editor))
            notes.append(f"append {out[-1]['role']} message #{len(out) - 1}")
        elif kind == "replace":
            i = _index(event, out)
            old = out[i]
            out[i] = _message(event.get("message"), editor)
            if isinstance(old, dict) and isinstance(old.get("id"), str):
                out[i]["id"] = old["id"]  # the same message, edited: its id stays
            notes.append(f"replace message #{i}")
        elif kind == "remove":
            i = _index(event, out)
            del out[i]
            notes.append(f"remove message #{i}")
        elif kind == "truncate":
            # target_id: the conversation from that message on
            keep = len(out) - _index(event, out) if "target_id" in event else \
                event.get("keep", 0)
            if type(keep) is not int or keep < 0:
                raise OpError("invalid", "truncate's keep must be an int >= 0")
            dropped = max(0, len(out) - keep)
            out = out[dropped:]
            notes.append(f"truncate: {dropped} message(s) dropped, {len(out)} kept")
        else:
            raise OpError("invalid", f"message_events[{n}]: type must be append, replace, "
                          "remove or truncate")
    return out, notes
