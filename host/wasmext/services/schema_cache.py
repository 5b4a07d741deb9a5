"""Compiled JSON Schema validators, shared by identical schemas.

Twenty copies of a plugin that declare the same tool, or a tool checked and
then created, compile its schema once. The key is the schema's canonical JSON
text, and a schema is shared only when that text reads back equal to it
(json turns an int key or a tuple into something else: such a schema is
compiled on its own), so a validator is only ever handed to a schema that is
the one it was compiled from. A compiled validator holds no per-call state.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

__all__ = ["shared_validator"]

MAX_KEY_CHARS = 64 * 1024  # a larger schema is compiled each time, not kept
MAX_KEPT = 512

_kept: OrderedDict[str, Any] = OrderedDict()
_lock = threading.Lock()


def _key(schema: Any) -> str | None:
    try:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    if len(text) > MAX_KEY_CHARS or json.loads(text) != schema:
        return None
    return text


def shared_validator(schema: Any, build: Callable[[], Any]) -> Any:
    """The validator an identical schema compiled, or `build()`'s (then kept)."""
    key = _key(schema)
    if key is None:
        return build()
    with _lock:
        kept = _kept.get(key)
        if kept is not None:
            _kept.move_to_end(key)
            return kept
    validator = build()  # outside the lock: compiling may take a while
    with _lock:
        kept = _kept.setdefault(key, validator)
        while len(_kept) > MAX_KEPT:
            _kept.popitem(last=False)
    return kept
