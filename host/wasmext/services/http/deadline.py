"""httpx request extensions that make a request end by one deadline, every byte included.

httpx's timeouts are per phase (connect, each write, each read), and httpcore
reads the timeout map once per phase: the whole header block, or the whole
body, is read with one per-recv timeout. A server that sends one byte every
50 ms therefore never trips a 1 s read timeout and holds the request for as
long as it likes. Two things bound it here:

- the trace hook shrinks the timeout map to what is left of the deadline
  before each phase, so the phases together end by it;
- a watchdog (`services.alarms`, one thread for the process) shuts down every socket
  the request opened at the deadline. A blocked `recv`, `send` or TLS
  handshake returns at once; httpx then reports a protocol or read error, and
  `passed(deadline)` tells the caller it was the deadline.

Shutting a socket down (not closing it) leaves the file descriptor to its
owner, so the watchdog can never touch a descriptor that was reused. A TLS
handshake runs on a new socket object (the TCP one is detached into it), which
httpcore reports only once the handshake is over; so requests use
`tls_context()`, whose sockets join the watched set as the handshake starts,
and a server dripping its handshake is cut off too.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx2

from wasmext.services.alarms import alarms

__all__ = ["bounded", "passed", "tls_context"]

# Events after which httpcore holds a new network stream (the TLS one replaces the TCP one).
_STREAM_EVENTS = frozenset({"connection.connect_tcp.complete", "connection.start_tls.complete",
                            "http_proxy.start_tls.complete"})


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


class _Watching(threading.local):
    sockets: _Sockets | None = None


_watching = _Watching()


class _WatchedTLSSocket(ssl.SSLSocket):
    """An SSL socket that joins the running request's watched set before its handshake."""

    def do_handshake(self, block: bool = False) -> None:
        """Join the set (the handshake runs on the requesting thread), then shake hands."""
        watched = _watching.sockets
        if watched is not None:
            watched.add(self)
        super().do_handshake(block)


_tls: ssl.SSLContext | None = None
_tls_lock = threading.Lock()


def tls_context() -> ssl.SSLContext:
    """The verifying client context for bounded requests (made once: loading the CA
    store costs milliseconds, and a context is safe to share between threads)."""
    global _tls
    with _tls_lock:
        if _tls is None:
            context = httpx2.create_ssl_context(trust_env=False)
            context.sslsocket_class = _WatchedTLSSocket
            _tls = context
        return _tls


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

    cancel = alarms().at(deadline, sockets.expire)
    outer, _watching.sockets = _watching.sockets, sockets
    try:
        yield {"timeout": timeouts, "trace": trace}
    finally:
        _watching.sockets = outer
        cancel()
