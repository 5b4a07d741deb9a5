"""wasmext's own worker threads for awaited plugin calls, with a cheap way back.

    future = call_pool().submit(loop, fn, arg)   # fn(arg) on a `wasmext-call-*` thread
    value = await future

`loop.run_in_executor` makes a concurrent.futures.Future, an asyncio future
and two chained callbacks (with their locks) per call; here a call is one
asyncio future and one tuple on a queue, and the worker hands the outcome
back with a single `loop.call_soon_threadsafe` of a module-level function.
That halves the hop's Python overhead (docs/performance.md); what is left is
waking a worker thread and waking the loop, which are the operating system's.

Threads start on demand, up to `min(32, cpu + 4)` (the ThreadPoolExecutor
rule), and wait on one queue. A worker counts itself idle before it hands its
answer back, so a task that awaits one call after another reuses the same
thread. Workers are daemons: nothing waits for a plugin call after the
program's event loop is gone. A call runs in a copy of the submitting task's
context variables (as `asyncio.to_thread` does), so what travels in them, the
chain of agent runs that guards against cycles (`services.agents`), crosses
the hop, and a call scope bound where the task started (an MCP request, an
agent run) reaches the plugin calls it makes (`callscope.joining`). As with
`run_in_executor`, a call whose await
was cancelled while it waited in the queue never starts, and a cancelled
await does not stop a call already running (each call is bounded by its
plugin's timeout); its answer is dropped.

Answers go back through the loop's `LoopShare`: workers append to one queue and
wake the loop only when nobody is draining it yet, and the drain settles answers
for at most `SLICE_S` per loop iteration, leaving the rest to the next one. With
1,000 sessions awaiting at once, handing every answer back in the iteration it
arrived (each waking its task, which then submits its next call) kept the loop
from its timers and sockets for over 100 ms; sliced, other coroutines run
between slices. `aio` charges inline hooks to the same share, so inline calls in
one iteration stop at the slice too (the rest wait for the next turn).

A loop sends the workers at most `CallPool.per_loop` calls younger than
`YOUNG_S` (4 ms) at a time, as many as there are workers; the rest wait on the
loop, in order, and go when an answer comes back or a call in flight grows
old. With every waiting call queued for the workers they never paused, and
each time the loop's thread gave the GIL up (every `select`) it queued behind
busy workers to get it back; bounded, the workers run out of work between two
drains and the loop mostly finds the GIL free. A call that waits (on I/O, on a
guest running outside the GIL) grows old and stops counting, so slow calls do
not hold fast ones back.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from wasmext.sandbox import callscope

__all__ = ["SLICE_S", "CallPool", "LoopShare", "call_pool", "share_of"]

# What wasmext's own work may take of one loop iteration before it leaves the rest
# to the next: answers handed back, inline hooks started (a fifth of the 20 ms an
# application may expect between two turns of its loop).
SLICE_S = 0.004
# Answers settled per drain: each wakes a task whose next step (its next submit, the
# application's code) runs in the next iteration, which the drain cannot time.
BATCH = 48
# A call in flight for longer than this is presumed to wait (on I/O, on a guest
# running outside the GIL) rather than run Python: it no longer counts against a
# loop's bound on calls in flight (`CallPool.per_loop`).
YOUNG_S = SLICE_S


class LoopShare:
    """wasmext's share of one event loop: answers to hand back, inline time spent."""

    __slots__ = ("__weakref__", "_again", "_armed", "_draining", "_held", "_held_armed",
                 "_in_flight", "_loop_ref", "_results", "_waiting", "spent")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weak: `_shares` is keyed by the loop, and a value holding its key would keep
        # every loop (one per `asyncio.run`) and its share alive for ever.
        self._loop_ref = weakref.ref(loop)
        self._results: deque[tuple[asyncio.Future[Any], Any, BaseException | None]] = deque()
        self._draining = False
        self._armed = False
        self._waiting: deque[asyncio.Future[None]] = deque()  # tasks queued by `turn`
        # Woken tasks that found the slice used up by those woken before them: they
        # go first next time, in the order they came.
        self._again: deque[asyncio.Future[None]] = deque()
        # Calls sent to workers, by future, with when they were sent (oldest first),
        # and calls held back on the loop until one of those answers or grows old.
        self._in_flight: dict[asyncio.Future[Any], float] = {}
        self._held: deque[tuple[CallPool, _Job]] = deque()
        self._held_armed = False
        self.spent = 0.0  # seconds of wasmext work on the loop in this iteration

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop_ref()
        if loop is None:  # only a worker may still hold a share whose loop is gone
            raise RuntimeError("the event loop is gone")
        return loop

    def may_inline(self) -> bool:
        """Is this iteration's slice left for one more inline call, with nobody queued
        for a turn ahead of it?"""
        return self.spent < SLICE_S and not self._waiting and not self._again

    def charge(self, seconds: float) -> None:
        """Count `seconds` of work on the loop against this iteration's slice."""
        self.spent += seconds
        self._arm()  # the slice refills when the loop comes round again

    async def turn(self) -> None:
        """Wait, in order, until this iteration's slice has room for more work."""
        if self.spent < SLICE_S and not self._waiting and not self._again:
            return
        waiter = self._loop.create_future()
        self._waiting.append(waiter)
        self._arm()
        await waiter
        # A batch is woken at once and each charges its own step: when those ahead
        # used the slice up, wait again, ahead of those who have not had a turn yet.
        while self.spent >= SLICE_S:
            waiter = self._loop.create_future()
            self._again.append(waiter)
            self._arm()
            await waiter

    def _arm(self) -> None:
        if not self._armed:
            self._armed = True
            self._loop.call_soon(self._refill)

    def _refill(self) -> None:
        self._armed = False
        self.spent = 0.0
        woken = 0
        # Each woken task charges its own step when it runs, in the next iteration.
        for waiting in (self._again, self._waiting):
            while waiting and woken < BATCH:
                waiter = waiting.popleft()
                if not waiter.done():  # a cancelled wait is skipped
                    waiter.set_result(None)
                    woken += 1
        if self._again or self._waiting:
            self._arm()

    def hand_back(self, future: asyncio.Future[Any], value: Any,
                  error: BaseException | None) -> None:
        """From a worker: queue an answer and wake the loop unless a drain is due."""
        self._results.append((future, value, error))
        if not self._draining:
            self._draining = True
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        clock = time.perf_counter
        started = clock()
        results = self._results
        in_flight = self._in_flight
        settled = 0
        while True:
            while results:
                answer = results.popleft()
                in_flight.pop(answer[0], None)
                _settle(*answer)
                settled += 1
                if results and (settled >= BATCH or clock() - started >= SLICE_S):
                    self.charge(clock() - started)
                    self._loop.call_soon(self._drain)  # the rest after other callbacks
                    return
            self._draining = False
            if not results:  # an answer that came after the last pop still wakes a drain
                break
            self._draining = True
        if self._held:
            self._send_held()
        self.charge(clock() - started)

    def _young(self, now: float, bound: int) -> int:
        """How many calls in flight were sent less than YOUNG_S ago (counted up to `bound`)."""
        young = 0
        for sent in reversed(self._in_flight.values()):  # newest first
            if now - sent >= YOUNG_S or young >= bound:
                break
            young += 1
        return young

    def send(self, pool: CallPool, job: _Job) -> None:
        """On the loop: pass `job` to the pool's workers, or hold it while the loop has
        `pool.per_loop` young calls in flight (held calls go first, in order)."""
        now = time.perf_counter()
        in_flight, bound = self._in_flight, pool.per_loop
        if not self._held and (len(in_flight) < bound or self._young(now, bound) < bound):
            in_flight[job[1]] = now
            pool.enqueue(job)
            return
        self._held.append((pool, job))
        self._arm_held()

    def _send_held(self) -> None:
        held, in_flight = self._held, self._in_flight
        now = time.perf_counter()
        while held:
            pool, job = held[0]
            if job[1].cancelled():  # given up while held: never sent, never started
                held.popleft()
                continue
            if self._young(now, pool.per_loop) >= pool.per_loop:
                self._arm_held()  # when the youngest in flight grows old, if none answers
                return
            held.popleft()
            in_flight[job[1]] = now
            pool.enqueue(job)

    def _arm_held(self) -> None:
        if not self._held_armed:
            self._held_armed = True
            self._loop.call_later(YOUNG_S, self._held_timer)

    def _held_timer(self) -> None:
        self._held_armed = False
        if self._held:
            self._send_held()


_shares: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopShare] = (
    weakref.WeakKeyDictionary())


def share_of(loop: asyncio.AbstractEventLoop) -> LoopShare:
    """The share of `loop` (made on first use; called on the loop's thread)."""
    share = _shares.get(loop)
    if share is None:
        share = _shares[loop] = LoopShare(loop)
    return share


_Job = tuple[LoopShare, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    """On the loop: pass a worker's outcome on, unless the awaiting task gave up."""
    if future.cancelled():
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)


def _joined(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` within reach of the call scope the submitting context carries."""
    with callscope.joining():
        return fn(*args)


class CallPool:
    """Worker threads fed from one queue; `submit` is called on the event loop's thread."""

    def __init__(self, max_workers: int, name: str = "wasmext-call") -> None:
        if max_workers < 1:
            raise ValueError("a call pool needs at least one worker")
        self.max_workers = max_workers
        self.name = name
        # How many young calls (YOUNG_S) one loop may have sent to the workers: no
        # more than the workers can run at once. With a thousand calls queued the
        # workers never paused, so whenever the loop's thread gave the GIL up (each
        # select) it queued for it behind busy workers, a switch interval (5 ms)
        # each; bounded, they run out of work between two drains and the loop finds
        # the GIL free. The rest wait on the loop, where a cancelled one costs
        # nothing; calls that wait (I/O, a long guest) grow old and stop counting.
        self.per_loop = max_workers
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        # No lock the loop's thread could wait on: a worker holding one while it runs
        # Python made `submit` give up the GIL, and getting it back from busy workers
        # took the loop a switch interval (5 ms) or several. Idle workers leave a token
        # (deque append and pop are atomic), and `next` of a counter numbers the starts.
        self._idle: deque[None] = deque()
        self._starts = itertools.count()
        self._started: list[threading.Thread] = []  # appended once per start (atomic)

    @property
    def threads(self) -> int:
        """How many worker threads were started."""
        return len(self._started)

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any],
               *args: Any) -> asyncio.Future[Any]:
        """A future of `fn(*args)`, run on a worker thread; `loop` must be running here."""
        future = loop.create_future()
        share = share_of(loop)
        share.send(self, (share, future, contextvars.copy_context().run,
                          (_joined, fn, *args)))
        return future

    def enqueue(self, job: _Job) -> None:
        """Queue a job for the workers, starting one if none is idle (on the loop's thread)."""
        self._jobs.put(job)
        try:
            self._idle.pop()  # an idle worker takes this job
        except IndexError:
            number = next(self._starts)
            if number < self.max_workers:
                worker = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self.name}-{number}")
                self._started.append(worker)
                worker.start()

    def _work(self) -> None:
        get, idle = self._jobs.get, self._idle.append
        while True:
            share, future, fn, args = get()
            if future.cancelled():  # given up while queued: never started, as an executor's
                idle(None)
                with contextlib.suppress(RuntimeError):  # the loop forgets it was sent
                    share.hand_back(future, None, None)
                del share, future, fn, args
                continue
            try:
                value, error = fn(*args), None
            except BaseException as exc:  # the awaiting task gets it, whatever it is
                value, error = None, exc
            idle(None)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it
                share.hand_back(future, value, error)
            del share, future, fn, args, value, error  # hold nothing while idle


_pool: CallPool | None = None
_pool_lock = threading.Lock()


def call_pool() -> CallPool:
    """The process's pool for awaited plugin calls (made on first use)."""
    pool = _pool
    if pool is not None:
        return pool
    return _make_pool()


def _make_pool() -> CallPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = CallPool(min(32, (os.cpu_count() or 1) + 4))
        return _pool


def _forget_pool() -> None:
    global _pool
    _pool = None  # a forked child has none of its parent's threads


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_pool)
