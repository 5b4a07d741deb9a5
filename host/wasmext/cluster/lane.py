"""The worker's lane: short stage calls back to back on one thread of its own.

A stage call goes to the lane's own thread, which waits on a queue: a burst of short
calls costs one thread wake-up, not one each, and a call costs no asyncio future, task
or context copy (each runs in a fresh, empty context, as a pool thread's would). The
answers come back to the loop in batches: the thread queues each and wakes the loop
once for all those queued until the loop takes them (`deliver` gets the batch).

When the oldest queued call has waited `LANE_WAIT_S` (the one running is slow), a
thread of the call pool joins and takes calls from the same queue until it is empty,
so that lane and helpers together run at most `limit` calls at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from wasmext.callpool import CallPool

__all__ = ["LANE_WAIT_S", "Answer", "Lane"]

# How long a queued stage call waits for a busy lane before a pool thread joins it:
# calls that take less run back to back on one thread, a slow one holds up the calls
# queued behind it by about this much.
LANE_WAIT_S = 0.002

# (what the call answers to, the function, its arguments, when it was queued)
_Job = tuple[Any, Callable[..., Any], tuple[Any, ...], float]
# (what the call answers to, its value, what it raised)
Answer = tuple[Any, Any, "BaseException | None"]


class Lane:
    """Calls run by the lane's thread (and pool threads behind a slow one); their
    answers handed to `deliver` on the loop, in batches."""

    def __init__(self, pool: CallPool, limit: int,
                 deliver: Callable[[list[Answer]], None], name: str = "wasmext-lane") -> None:
        self._pool, self._limit, self._deliver, self._name = pool, max(1, limit), deliver, name
        self._jobs: deque[_Job] = deque()
        self._answers: deque[Answer] = deque()
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle = False  # the lane's thread waits for a wake-up (set by that thread)
        self._handing = False  # a delivery is scheduled on the loop
        self._helpers = 0  # pool threads taking calls
        self._helpers_lock = threading.Lock()  # changed on the loop and on pool threads
        self._armed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.pending = 0  # calls queued or running whose answer the loop has not had

    def submit(self, loop: asyncio.AbstractEventLoop, token: Any, fn: Callable[..., Any],
               *args: Any) -> None:
        """Run `fn(*args)` off the loop; `(token, value, error)` reaches `deliver`
        (called on the loop's thread)."""
        self._loop = loop
        self.pending += 1
        self._jobs.append((token, fn, args, time.monotonic()))
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, daemon=True, name=self._name)
            self._thread.start()
        elif self._idle:
            self._idle = False
            self._wake.put(None)
        elif not self._armed and self._limit > 1:
            self._armed = True
            loop.call_later(LANE_WAIT_S, self._check, loop)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._armed = False
        try:
            queued_at = self._jobs[0][3]
        except IndexError:
            return
        if time.monotonic() - queued_at >= LANE_WAIT_S:
            with self._helpers_lock:
                join = self._helpers < self._limit - 1
                self._helpers += join
            if join:
                self._pool.submit(loop, self._help)
        self._armed = True
        loop.call_later(LANE_WAIT_S, self._check, loop)

    def _serve(self) -> None:
        jobs, wait = self._jobs, self._wake.get
        while True:
            self._run_queued()
            self._idle = True
            if jobs:  # queued after the last take, by a submit that saw us busy
                self._idle = False
                continue
            wait()

    def _help(self) -> None:
        try:
            self._run_queued()
        finally:
            with self._helpers_lock:
                self._helpers -= 1

    def _run_queued(self) -> None:
        jobs, answers = self._jobs, self._answers
        while True:
            try:
                token, fn, args, _ = jobs.popleft()
            except IndexError:
                return
            try:
                value, error = contextvars.Context().run(fn, *args), None
            except BaseException as exc:  # the loop gets it, whatever it is
                value, error = None, exc
            answers.append((token, value, error))
            del token, fn, args, value, error  # hold nothing while idle
            if not self._handing:
                self._handing = True
                loop = self._loop
                if loop is not None:
                    with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits
                        loop.call_soon_threadsafe(self._hand_over)

    def _hand_over(self) -> None:
        self._handing = False  # before taking: an answer queued from now on wakes us again
        answers = self._answers
        batch = []
        while answers:
            batch.append(answers.popleft())
        if batch:
            self.pending -= len(batch)
            self._deliver(batch)
