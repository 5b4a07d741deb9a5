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
one iteration stop at the slice too (the rest take the pool).
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


class LoopShare:
    """wasmext's share of one event loop: answers to hand back, inline time spent."""

    __slots__ = ("__weakref__", "_armed", "_draining", "_loop_ref", "_results", "_waiting",
                 "spent")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weak: `_shares` is keyed by the loop, and a value holding its key would keep
        # every loop (one per `asyncio.run`) and its share alive for ever.
        self._loop_ref = weakref.ref(loop)
        self._results: deque[tuple[asyncio.Future[Any], Any, BaseException | None]] = deque()
        self._draining = False
        self._armed = False
        self._waiting: deque[asyncio.Future[None]] = deque()  # tasks queued by `turn`
        self.spent = 0.0  # seconds of wasmext work on the loop in this iteration

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop_ref()
        if loop is None:  # only a worker may still hold a share whose loop is gone
            raise RuntimeError("the event loop is gone")
        return loop

    def may_inline(self) -> bool:
        """Is this iteration's slice left for one more inline call?"""
        return self.spent < SLICE_S

    def charge(self, seconds: float) -> None:
        """Count `seconds` of work on the loop against this iteration's slice."""
        self.spent += seconds
        self._arm()  # the slice refills when the loop comes round again

    async def turn(self) -> None:
        """Wait, in order, until this iteration's slice has room for more work."""
        if self.spent < SLICE_S and not self._waiting:
            return
        waiter = self._loop.create_future()
        self._waiting.append(waiter)
        self._arm()
        await waiter

    def _arm(self) -> None:
        if not self._armed:
            self._armed = True
            self._loop.call_soon(self._refill)

    def _refill(self) -> None:
        self._armed = False
        self.spent = 0.0
        waiting, woken = self._waiting, 0
        # Each woken task charges its own step when it runs, in the next iteration.
        while waiting and woken < BATCH:
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                woken += 1
        if waiting:
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
        settled = 0
        while True:
            while results:
                _settle(*results.popleft())
                settled += 1
                if results and (settled >= BATCH or clock() - started >= SLICE_S):
                    self.charge(clock() - started)
                    self._loop.call_soon(self._drain)  # the rest after other callbacks
                    return
            self._draining = False
            if not results:  # an answer that came after the last pop still wakes a drain
                break
            self._draining = True
        self.charge(clock() - started)


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
        self._jobs.put((share_of(loop), future, contextvars.copy_context().run,
                        (_joined, fn, *args)))
        try:
            self._idle.pop()  # an idle worker takes this job
        except IndexError:
            number = next(self._starts)
            if number < self.max_workers:
                worker = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self.name}-{number}")
                self._started.append(worker)
                worker.start()
        return future

    def _work(self) -> None:
        get, idle = self._jobs.get, self._idle.append
        while True:
            share, future, fn, args = get()
            if future.cancelled():  # given up while queued: never started, as an executor's
                idle(None)
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
