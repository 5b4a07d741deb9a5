"""The worker's lane: short stage calls back to back on one thread of its own.

A stage call goes to the lane's own thread, which waits on a queue: a burst of short
calls costs one thread wake-up, not one each, and a call costs no asyncio future, task
or context copy (each runs in a fresh, empty context, as a pool thread's would). The
answers come back to the loop in batches: the thread queues each and wakes the loop
once for all those queued until the loop takes them (`deliver` gets the batch).

When calls are queued and every call running has run for `LANE_WAIT_S` (a slow one
holds the lane), a thread of the call pool joins and takes calls from the same queue
until it is empty, so that lane and helpers together run at most `limit` calls at once.
A queue that is merely long does not start one: short calls behind short calls gain
nothing from another thread under one GIL (on two shared cores, helpers joining a busy
lane of short calls only made three threads take turns at the GIL).
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

# How long the calls running may take before a pool thread joins them for the calls
# queued: calls that take less run back to back on one thread, a slow one holds up
# the calls queued behind it by about this much.
LANE_WAIT_S = 0.002

# (what the call answers to, the function, its arguments)
_Job = tuple[Any, Callable[..., Any], tuple[Any, ...]]
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
        self._busy: dict[int, float] = {}  # when each runner's call started, by thread
        self._armed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.pending = 0  # calls queued or running whose answer the loop has not had

    def submit(self, loop: asyncio.AbstractEventLoop, token: Any, fn: Callable[..., Any],
               *args: Any) -> None:
        """Run `fn(*args)` off the loop; `(token, value, error)` reaches `deliver`
        (called on the loop's thread)."""
        self._loop = loop
        self.pending += 1
        self._jobs.append((token, fn, args))
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
        if not self._jobs:
            return
        started = list(self._busy.values())  # one C call: runners change it meanwhile
        now = time.monotonic()
        if started and all(now - t >= LANE_WAIT_S for t in started):
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
        jobs, answers, busy = self._jobs, self._answers, self._busy
        me = threading.get_ident()
        while True:
            try:
                token, fn, args = jobs.popleft()
            except IndexError:
                return
            busy[me] = time.monotonic()
            try:
                value, error = contextvars.Context().run(fn, *args), None
            except BaseException as exc:  # the loop gets it, whatever it is
                value, error = None, exc
            finally:
                del busy[me]
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
