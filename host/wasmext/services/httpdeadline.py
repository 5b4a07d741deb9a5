"""httpx request extensions that make a request end by one deadline, every byte included.

httpx's timeouts are per phase (connect, each write, each read), and httpcore
reads the timeout map once per phase: the whole header block, or the whole
body, is read with one per-recv timeout. A server that sends one byte every
50 ms therefore never trips a 1 s read timeout and holds the request for as
long as it likes. Two things bound it here:

- the trace hook shrinks the timeout map to what is left of the deadline
  before each phase, so the phases together end by it;
- a watchdog (`Alarms`, one thread for the process) shuts down every socket
  the request opened at the deadline. A blocked `recv`, `send` or TLS
  handshake returns at once; httpx then reports a protocol or read error, and
  `passed(deadline)` tells the caller it was the deadline.

Shutting a socket down (not closing it) leaves the file descriptor to its
owner, so the watchdog can never touch a descriptor that was reused.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Alarms", "alarms", "bounded", "passed"]

log = logging.getLogger("wasmext.services.httpdeadline")

# Events after which httpcore holds a new network stream (the TLS one replaces the TCP one).
_STREAM_EVENTS = frozenset({"connection.connect_tcp.complete", "connection.start_tls.complete",
                            "http_proxy.start_tls.complete"})


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


def passed(deadline: float) -> bool:
    """Has `deadline` (time.monotonic()) passed? (Then a transport error was the watchdog.)"""
    return time.monotonic() >= deadline


class _Sockets:
    """The sockets one request opened; all shut down once the deadline has passed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.expired = False

    def add(self, sock: Any) -> None:
        if not isinstance(sock, socket.socket):
            return
        with self.lock:
            self.open.append(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            sockets = list(self.open)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError, ValueError):
        sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def bounded(deadline: float) -> Iterator[dict[str, Any]]:
    """Extensions for `client.build_request` / `client.stream` ending by `deadline`
    (a time.monotonic() instant): use them only inside this block."""
    left = max(0.001, deadline - time.monotonic())
    timeouts = {"connect": left, "read": left, "write": left, "pool": left}
    sockets = _Sockets()

    def trace(event: str, info: Any) -> None:
        if event.endswith(".started"):
            rest = max(0.001, deadline - time.monotonic())
            timeouts["read"] = timeouts["write"] = timeouts["connect"] = rest
        elif event in _STREAM_EVENTS and isinstance(info, dict):
            stream = info.get("return_value")
            get = getattr(stream, "get_extra_info", None)
            if callable(get):
                sockets.add(get("socket"))

    cancel = _alarms.at(deadline, sockets.expire)
    try:
        yield {"timeout": timeouts, "trace": trace}
    finally:
        cancel()
