"""The worker's lane onto the call pool: short stage calls back to back on one thread.

A pool thread that takes the lane runs the calls queued meanwhile back to back, so a
burst of short calls costs one thread wake-up, not one each; another thread joins
only when the oldest queued call has waited `LANE_WAIT_S` (the one running is slow),
up to the pool's size. Answers go back through the loop's `LoopShare`, batched as the
pool's are (`wasmext.callpool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from wasmext.callpool import CallPool, share_of

__all__ = ["LANE_WAIT_S", "Lane"]

# How long a queued stage call waits for a busy lane before another pool thread joins
# it: calls that take less run back to back on one thread, a slow one holds up the
# calls queued behind it by about this much.
LANE_WAIT_S = 0.002


class Lane:
    """Stage calls for the call pool, run back to back by the thread that takes them."""

    def __init__(self, pool: CallPool) -> None:
        self._pool = pool
        self._jobs: deque[tuple[asyncio.Future[Any], contextvars.Context,
                                Callable[..., Any], tuple[Any, ...], float]] = deque()
        self._lock = threading.Lock()
        self._runners = 0
        self._armed = False

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any],
               *args: Any) -> asyncio.Future[Any]:
        """A future of `fn(*args)` run on a pool thread (called on the loop's thread)."""
        future = loop.create_future()
        with self._lock:
            self._jobs.append((future, contextvars.copy_context(), fn, args, time.monotonic()))
            start = self._runners == 0
            if start:
                self._runners += 1
        if start:
            self._pool.submit(loop, self._run, share_of(loop))
        elif not self._armed:
            self._armed = True
            loop.call_later(LANE_WAIT_S, self._check, loop)
        return future

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._armed = False
        with self._lock:
            if not self._jobs:
                return
            waited = time.monotonic() - self._jobs[0][4]
            start = waited >= LANE_WAIT_S and self._runners < self._pool.max_workers
            if start:
                self._runners += 1
        if start:
            self._pool.submit(loop, self._run, share_of(loop))
        self._armed = True
        loop.call_later(LANE_WAIT_S, self._check, loop)

    def _run(self, share: Any) -> None:
        while True:
            with self._lock:
                if not self._jobs:
                    self._runners -= 1
                    return
                future, context, fn, args, _ = self._jobs.popleft()
            if future.cancelled():  # its request's task gave up while it was queued
                continue
            try:
                value, error = context.run(fn, *args), None
            except BaseException as exc:  # the awaiting task gets it, whatever it is
                value, error = None, exc
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it
                share.hand_back(future, value, error)
            del future, context, fn, args, value, error  # hold nothing while idle
