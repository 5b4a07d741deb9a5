"""httpx request extensions that make a request end by one deadline, every byte included.

httpx's timeouts are per phase (connect, each write, each read), and httpcore
reads the timeout map once per phase: the whole header block, or the whole
body, is read with one per-recv timeout. A server that sends one byte every
50 ms therefore never trips a 1 s read timeout and holds the request for as
long as it likes. Two things bound it here, both in the transport's network
streams (`bounded_transport`; `bounded` is for clients built on it):

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
`tls_context()`, whose sockets join the watched set as the handshake starts,
and a server dripping its handshake is cut off too.

A pooled connection (`bounded_transport`) serves several requests and opens no
socket for the later ones, so its streams join the running request's watched
set on every read and write: a keep-alive connection is cut off at the deadline
of whichever request is using it, like a new one.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpcore2
import httpx2

from wasmext.services.alarms import alarms

__all__ = ["bounded", "bounded_transport", "passed", "tls_context"]


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
    (a time.monotonic() instant), for a client on `bounded_transport`: use them only
    inside this block."""
    left = max(0.001, deadline - time.monotonic())
    sockets = _Sockets(deadline)
    cancel = alarms().at(deadline, sockets.expire)
    outer, _watching.sockets = _watching.sockets, sockets
    try:
        yield {"timeout": {"connect": left, "read": left, "write": left, "pool": left}}
    finally:
        _watching.sockets = outer
        cancel()


def _watched(sock: Any, timeout: float | None) -> float | None:
    """Join `sock` to the running `bounded` block's set; the timeout cut to its deadline."""
    watched = _watching.sockets
    if watched is None:
        return timeout
    watched.add(sock)
    return watched.timeout(timeout)


class _WatchedStream(httpcore2.NetworkStream):
    """A network stream that joins the running `bounded` block's watched set before
    each read and write, whichever request (a pooled connection serves many) it is."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner
        self._socket = inner.get_extra_info("socket")

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Read, cut off at the running request's deadline."""
        return self._inner.read(max_bytes, _watched(self._socket, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Write, cut off at the running request's deadline."""
        self._inner.write(buffer, _watched(self._socket, timeout))

    def close(self) -> None:
        """Close the underlying stream."""
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        """Upgrade to TLS (its socket joins the set as the handshake starts:
        `_WatchedTLSSocket`); the TLS stream is watched the same way."""
        watched = _watching.sockets
        if watched is not None:
            timeout = watched.timeout(timeout)
        return _WatchedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        """The underlying stream's answer (the pool asks whether an idle one is readable)."""
        return self._inner.get_extra_info(info)


class _WatchedBackend(httpcore2.NetworkBackend):
    """The sync backend, its streams watched (`_WatchedStream`)."""

    def __init__(self) -> None:
        self._inner = httpcore2.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Any = None) -> httpcore2.NetworkStream:
        """Connect by the running request's deadline, watched from the first byte."""
        watched = _watching.sockets
        if watched is not None:
            timeout = watched.timeout(timeout)
        stream = _WatchedStream(self._inner.connect_tcp(host, port, timeout, local_address,
                                                        socket_options))
        _watched(stream._socket, None)
        return stream

    def sleep(self, seconds: float) -> None:
        """As the sync backend sleeps."""
        self._inner.sleep(seconds)


def bounded_transport(max_connections: int = 16, keepalive_s: float = 30.0
                      ) -> httpx2.HTTPTransport:
    """An HTTP/1.1 transport keeping connections alive, verifying with `tls_context()`,
    whose every read and write is bounded by the running `bounded` block's deadline."""
    limits = httpx2.Limits(max_connections=max_connections,
                           max_keepalive_connections=max_connections,
                           keepalive_expiry=keepalive_s)
    transport = httpx2.HTTPTransport(verify=tls_context(), trust_env=False, limits=limits)
    # httpx builds its pool without a backend parameter; the same pool with the
    # watched backend replaces it before the transport's first use.
    transport._pool = httpcore2.ConnectionPool(
        ssl_context=tls_context(), max_connections=max_connections,
        max_keepalive_connections=max_connections, keepalive_expiry=keepalive_s,
        network_backend=_WatchedBackend())
    return transport
