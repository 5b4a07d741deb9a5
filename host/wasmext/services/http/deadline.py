"""httpx request extensions that make a request end by one deadline, every byte included.

httpx's timeouts are per phase (connect, each write, each read), and httpcore
reads the timeout map once per phase: the whole header block, or the whole
body, is read with one per-recv timeout. A server that sends one byte every
50 ms therefore never trips a 1 s read timeout and holds the request for as
long as it likes. Two things bound it here, both in the transport's network
streams (`services.http.transport.bounded_transport`; `bounded` is for clients
built on it):

- every connect, read, write and TLS handshake gets at most what is left of
  the deadline as its timeout, so the phases together end by it;
- a watchdog (`services.alarms`, one thread for the process) shuts down every socket
  the request used at the deadline. A blocked `recv`, `send` or TLS
  handshake returns at once; httpx then reports a protocol or read error, and
  `passed(deadline)` tells the caller it was the deadline.

(An httpcore trace hook did both before: it cost every request about ten
callbacks, and the streams see every socket anyway.)

Shutting a socket down (not closing it) leaves the file descriptor to its
owner, so the watchdog can never touch a descriptor that was reused. A TLS
handshake runs on a new socket object (the TCP one is detached into it), which
httpcore reports only once the handshake is over; so requests use
`transport.tls_context()`, whose sockets join the watched set as the handshake starts,
and a server dripping its handshake is cut off too.

A pooled connection (`transport.bounded_transport`) serves several requests and opens no
socket for the later ones, so its streams join the running request's watched
set on every read and write: a keep-alive connection is cut off at the deadline
of whichever request is using it, like a new one.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

from wasmext.services.alarms import alarms

__all__ = ["bounded", "passed", "watch", "watching"]


def passed(deadline: float) -> bool:
    """Has `deadline` (time.monotonic()) passed? (Then a transport error was the watchdog.)"""
    return time.monotonic() >= deadline


class _Sockets:
    """The sockets one request used; all shut down once the deadline has passed."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.lock = threading.Lock()
        self.open: set[socket.socket] = set()
        self.expired = False

    def timeout(self, asked: float | None) -> float:
        """`asked` (None: no limit) cut to what is left of the deadline."""
        left = max(0.001, self.deadline - time.monotonic())
        return left if asked is None else min(asked, left)

    def add(self, sock: Any) -> None:
        if not isinstance(sock, socket.socket) or sock in self.open:
            return
        with self.lock:
            self.open.add(sock)
            expired = self.expired
        if expired:
            _shut(sock)

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            sockets = list(self.open)
        for sock in sockets:
            _shut(sock)


class _Watching(threading.local):
    sockets: _Sockets | None = None


watching = _Watching()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError, ValueError):
        sock.shutdown(socket.SHUT_RDWR)


class bounded:  # noqa: N801 - used as a function: `with bounded(deadline) as extensions`
    """Extensions for `client.build_request` / `client.stream` ending by `deadline`
    (a time.monotonic() instant), for a client on `bounded_transport`: use them only
    inside this block. (A class, not a generator: every request enters one.)"""

    __slots__ = ("_cancel", "_deadline", "_outer", "_sockets")

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def __enter__(self) -> dict[str, Any]:
        deadline = self._deadline
        left = max(0.001, deadline - time.monotonic())
        sockets = self._sockets = _Sockets(deadline)
        self._cancel = alarms().at(deadline, sockets.expire)
        self._outer, watching.sockets = watching.sockets, sockets
        return {"timeout": {"connect": left, "read": left, "write": left, "pool": left}}

    def __exit__(self, *exc_info: object) -> None:
        watching.sockets = self._outer
        self._cancel()


def watch(sock: Any, timeout: float | None) -> float | None:
    """Join `sock` to the running `bounded` block's set; the timeout cut to its deadline."""
    watched = watching.sockets
    if watched is None:
        return timeout
    watched.add(sock)
    return watched.timeout(timeout)


