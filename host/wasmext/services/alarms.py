"""The process's deadline watchdog: callbacks run at time.monotonic() instants.

Work that blocks where no timeout reaches it (a socket read fed one byte at a
time, an agent run nobody waits for any more) is ended from outside: the
callback shuts a socket down or cancels a call scope. One daemon thread keeps
every pending deadline in a heap; a cancelled one is dropped when it comes up.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Alarms", "alarms"]

log = logging.getLogger("wasmext.services.alarms")


class Alarms:
    """Run callbacks at time.monotonic() instants, on one daemon thread."""

    def __init__(self, name: str = "wasmext-deadline") -> None:
        self.name = name
        self._heap: list[tuple[float, int, list[Callable[[], Any] | None]]] = []
        self._cond = threading.Condition()
        self._numbers = itertools.count()
        self._thread: threading.Thread | None = None

    def at(self, when: float, callback: Callable[[], Any]) -> Callable[[], None]:
        """Run `callback()` at `when` (quickly: it shares the thread); returns a canceller."""
        slot: list[Callable[[], Any] | None] = [callback]
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._numbers), slot))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            # The thread sleeps until the earliest alarm: only a new earliest one needs
            # to wake it (a wake-up per request costs the requester a GIL hand-off).
            if self._heap[0][2] is slot:
                self._cond.notify()

        def cancel() -> None:
            slot[0] = None
        return cancel

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][2][0] is None:
                    heapq.heappop(self._heap)  # cancelled: drop without waiting for it
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                slot = heapq.heappop(self._heap)[2]
            callback, slot[0] = slot[0], None
            if callback is not None:
                try:
                    callback()
                except Exception:  # one failed alarm must not stop the others
                    log.debug("a deadline callback failed", exc_info=True)


_alarms = Alarms()


def alarms() -> Alarms:
    """The process's deadline watchdog."""
    return _alarms


def _forget_thread() -> None:
    _alarms._thread = None  # a forked child has none of its parent's threads
    _alarms._heap = []
    _alarms._cond = threading.Condition()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_thread)
