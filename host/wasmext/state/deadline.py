"""How long a state operation may wait: the rest of the calling hook's deadline.

A host call that reaches the store runs inside `within(deadline)` (a
`time.monotonic()` instant); every backend bounds each of its waits (a Redis
socket connect, send or read, the SQLite busy wait, the store's own lock) by
`remaining()`, and `StateUnavailable` is raised once nothing is left. Outside
any call (the command line, tests) the store's own default timeout applies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from wasmext.state.base import StateUnavailable

__all__ = ["current", "remaining", "within"]

_local = threading.local()


@contextmanager
def within(deadline: float | None) -> Iterator[None]:
    """Bound the state operations of this thread by `deadline` (None: no call deadline)."""
    saved = getattr(_local, "deadline", None)
    _local.deadline = deadline if saved is None or deadline is None else min(saved, deadline)
    try:
        yield
    finally:
        _local.deadline = saved


def remaining(default: float) -> float:
    """Seconds this thread's state operation may still wait, at most `default`;
    StateUnavailable when the call's deadline has passed."""
    deadline: float | None = getattr(_local, "deadline", None)
    if deadline is None:
        return default
    left = deadline - time.monotonic()
    if left <= 0:
        raise StateUnavailable("the call's deadline passed while waiting on state storage")
    return min(left, default)


def current() -> float | None:
    """This thread's state deadline (a `time.monotonic()` instant), None outside a call."""
    deadline: float | None = getattr(_local, "deadline", None)
    return deadline
