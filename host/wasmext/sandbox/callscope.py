"""A call scope: one outside request (an MCP `tools/call`, say) that may be cancelled
or want progress while a worker thread runs it through plugins and tools.

    scope = CallScope(progress=report)   # report(progress, total, message), any thread
    def work():
        with scope.bound():              # in the worker thread that runs the call
            return host.tools.call(...)
    ...
    scope.cancel()                       # from any thread

`cancel()` interrupts what runs on the bound thread: every plugin call in
progress there reaches its deadline at once (the call tree's deadlines pass,
so host calls and nested calls end; a guest's store has its deadline checked
every epoch tick by sandbox.watchdog, so even a guest spinning in one loop
stops within a tick or two), each ending with `Cancelled`, and the callbacks
registered with `on_cancel` run (an MCP client cancels its upstream request
there). A host tool that a plugin calls runs in a `calltree.run_bounded` worker
thread; the worker joins the scope (`joined`), so a plugin that tool calls is
reached too. `current()` is the scope bound to this thread, so an
op or a tool runner deep in the call finds it (None outside any scope).

A bound scope is also kept in a context variable, so a thread that runs work
in a copy of the caller's context (wasmext's call pool does, for an
`AsyncSession` used inside a scope) can join it with `joining()`: a cancel
then reaches the plugin calls it runs as well.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from wasmext.sandbox import calltree

__all__ = ["CallScope", "current", "joining"]

log = logging.getLogger("wasmext.sandbox")
KEEP_INTERRUPTING_S = 60.0
INTERRUPT_EVERY_S = 0.02
Progress = Callable[[float, "float | None", "str | None"], None]


class CallScope:
    """One outside request that may be cancelled or want progress."""

    def __init__(self, progress: Progress | None = None) -> None:
        self.cancelled = threading.Event()
        self._progress = progress
        self._last: float | None = None
        self._callbacks: list[Callable[[], Any]] = []
        self._lock = threading.Lock()
        # The frame stacks of the threads this scope reaches: the bound one and the
        # run_bounded workers it started (each a list that lives as long as its thread).
        self._stacks: list[list[Any]] = []
        self.reported = 0  # progress notifications passed on
        self.cancelled_at: float | None = None  # monotonic
        self._done = threading.Event()  # the bound block has ended

    @contextmanager
    def bound(self) -> Iterator[CallScope]:
        """Bind to this thread for the block: cancel() reaches what runs here."""
        try:
            with self.joined():
                yield self
        finally:
            self._done.set()

    @contextmanager
    def joined(self) -> Iterator[CallScope]:
        """Reach this thread too for the block (a worker doing part of the bound call)."""
        previous = getattr(_bound, "scope", None)
        _bound.scope = self
        token = _in_context.set(self)
        stack = calltree._tree.stack  # each plugin call's frame names its guest
        with self._lock:
            self._stacks.append(stack)
        try:
            yield self
        finally:
            _in_context.reset(token)
            _bound.scope = previous
            with self._lock:
                self._stacks = [s for s in self._stacks if s is not stack]

    def on_cancel(self, callback: Callable[[], Any]) -> Callable[[], None]:
        """Run `callback` on cancel (at once when already cancelled); returns a remover."""
        with self._lock:
            if not self.cancelled.is_set():
                self._callbacks.append(callback)

                def remove() -> None:
                    with self._lock:
                        if callback in self._callbacks:
                            self._callbacks.remove(callback)
                return remove
        callback()
        return lambda: None

    def cancel(self) -> None:
        """Interrupt the scope's plugin calls and run its cancel callbacks, once."""
        with self._lock:
            if self.cancelled.is_set():
                return
            self.cancelled_at = time.monotonic()
            self.cancelled.set()
            callbacks, self._callbacks = self._callbacks, []
            frames = [f for stack in self._stacks for f in list(stack)]
        self._interrupt(frames)
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.debug("a cancel callback failed", exc_info=True)
        # A plugin call may start after this moment (or restore its deadline after a
        # host call): keep interrupting until the bound block ends.
        threading.Thread(target=self._keep_interrupting, name="wasmext-cancel",
                         daemon=True).start()

    def _keep_interrupting(self) -> None:
        stop = time.monotonic() + KEEP_INTERRUPTING_S
        while not self._done.wait(INTERRUPT_EVERY_S) and time.monotonic() < stop:
            with self._lock:
                frames = [f for stack in self._stacks for f in list(stack)]
            self._interrupt(frames)

    @staticmethod
    def _interrupt(frames: list[Any]) -> None:
        past = time.monotonic() - 1.0
        for frame in frames:
            if frame is None:
                continue
            frame.deadline = past  # a watched guest's own thread reads it within a tick
            guest = getattr(frame, "guest", None)
            try:
                if guest is None or getattr(guest, "watched", False):
                    continue
                interrupt = getattr(guest, "interrupt", None)
            except ReferenceError:  # a native instance (named by a proxy) already dropped:
                continue            # its call has ended, nothing runs there to interrupt
            if interrupt is not None:  # a backend with its own way in (Extism's cancel)
                try:
                    interrupt()
                except Exception:
                    log.debug("could not interrupt a guest", exc_info=True)
                continue
            # Without the watchdog nothing on the guest's thread would look before its
            # time-out, so the store's deadline is written from here, where the guest
            # reads it at its next function entry. wasmtime's Store is not Sync: this
            # write races with the running guest, which is why a watched store
            # (every store on a wasmtime fastcall trusts) never gets it.
            try:
                guest.store.set_epoch_deadline(0)
            except Exception:
                log.debug("could not interrupt a guest", exc_info=True)

    def report(self, progress: float, total: float | None = None,
               message: str | None = None) -> bool:
        """Pass a progress step on (dropped unless it increases); True when passed on."""
        if self._progress is None or self.cancelled.is_set():
            return False
        with self._lock:
            if self._last is not None and progress <= self._last:
                return False
            self._last = progress
        try:
            self._progress(progress, total, message)
        except Exception:  # progress is advisory
            log.debug("progress not delivered", exc_info=True)
            return False
        self.reported += 1
        return True


class _Bound(threading.local):
    scope: CallScope | None = None


_bound = _Bound()


_in_context: contextvars.ContextVar[CallScope | None] = contextvars.ContextVar(
    "wasmext_call_scope", default=None)


def current() -> CallScope | None:
    """The scope bound to this thread (None outside any)."""
    return _bound.scope


def joining() -> AbstractContextManager[Any]:
    """Join the scope this context carries, on a thread that has none bound (a worker
    running in a copy of the caller's context); a no-op otherwise."""
    scope = _in_context.get()
    if scope is None or _bound.scope is not None:
        return contextlib.nullcontext()
    return scope.joined()


def _carried() -> Callable[[], AbstractContextManager[CallScope]] | None:
    scope = current()
    return None if scope is None else scope.joined


calltree.carry(_carried)  # a host tool's worker thread stays within reach of a cancel
