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
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from wasmext.sandbox import callscope

__all__ = ["CallPool", "call_pool"]

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any],
             tuple[Any, ...]]


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
        self._lock = threading.Lock()
        self._idle = 0
        self._threads = 0
        self._numbers = itertools.count()

    @property
    def threads(self) -> int:
        """How many worker threads were started."""
        return self._threads

    def submit(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., Any],
               *args: Any) -> asyncio.Future[Any]:
        """A future of `fn(*args)`, run on a worker thread; `loop` must be running here."""
        future = loop.create_future()
        with self._lock:
            if self._idle:
                self._idle -= 1  # an idle worker takes this job
                spawn = False
            else:
                spawn = self._threads < self.max_workers
                if spawn:
                    self._threads += 1
        self._jobs.put((loop, future, contextvars.copy_context().run, (_joined, fn, *args)))
        if spawn:
            threading.Thread(target=self._work, daemon=True,
                             name=f"{self.name}-{next(self._numbers)}").start()
        return future

    def _work(self) -> None:
        get, lock = self._jobs.get, self._lock
        while True:
            loop, future, fn, args = get()
            if future.cancelled():  # given up while queued: never started, as an executor's
                with lock:
                    self._idle += 1
                continue
            try:
                value, error = fn(*args), None
            except BaseException as exc:  # the awaiting task gets it, whatever it is
                value, error = None, exc
            with lock:
                self._idle += 1
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody awaits it
                loop.call_soon_threadsafe(_settle, future, value, error)
            del loop, future, fn, args, value, error  # hold nothing while idle


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
