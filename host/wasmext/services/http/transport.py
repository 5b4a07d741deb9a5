"""The keep-alive transport whose every connect, read, write and TLS handshake stays
under the running `deadline.bounded` block's deadline.

Its own module so that httpx and httpcore are imported with the first client, not
with the host: the two and their dependencies leave about 20,000 objects that
CPython's garbage collector tracks, and a full collection scans every one of them
(on an event loop's thread, its worst pause; docs/performance.md, sixth round). The
host imports this module (and builds the TLS context) when it loads a plugin granted
`http`, or `llm` with an endpoint configured, so that no plugin's first call pays for
it; a host whose plugins never fetch never imports them.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

import httpcore2
import httpx2

from wasmext.services.http.deadline import watch, watching

__all__ = ["bounded_transport", "tls_context"]


class _WatchedTLSSocket(ssl.SSLSocket):
    """An SSL socket that joins the running request's watched set before its handshake."""

    def do_handshake(self, block: bool = False) -> None:
        """Join the set (the handshake runs on the requesting thread), then shake hands."""
        watched = watching.sockets
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


class _WatchedStream(httpcore2.NetworkStream):
    """A network stream that joins the running `bounded` block's watched set before
    each read and write, whichever request (a pooled connection serves many) it is."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner
        self._socket = inner.get_extra_info("socket")

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Read, cut off at the running request's deadline."""
        return self._inner.read(max_bytes, watch(self._socket, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Write, cut off at the running request's deadline."""
        self._inner.write(buffer, watch(self._socket, timeout))

    def close(self) -> None:
        """Close the underlying stream."""
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        """Upgrade to TLS (its socket joins the set as the handshake starts:
        `_WatchedTLSSocket`); the TLS stream is watched the same way."""
        watched = watching.sockets
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
        watched = watching.sockets
        if watched is not None:
            timeout = watched.timeout(timeout)
        stream = _WatchedStream(self._inner.connect_tcp(host, port, timeout, local_address,
                                                        socket_options))
        watch(stream._socket, None)
        return stream

    def sleep(self, seconds: float) -> None:
        """As the sync backend sleeps."""
        self._inner.sleep(seconds)


class _AnsweredOnceConnection(httpcore2.HTTPConnection):
    """A connection that is not reused while bytes its server sent past its last answer
    wait unread: they would be read as the next request's answer, whoever sends it (a
    pooled connection serves every plugin fetching from its address)."""

    def has_expired(self) -> bool:
        """Expired as httpcore says, or idle with an answer nobody asked for yet."""
        inner = getattr(self, "_connection", None)
        state = getattr(inner, "_h11_state", None)  # h11 keeps what it read past the answer
        if state is not None and inner is not None and inner.is_idle() \
                and state.trailing_data[0]:
            return True
        return super().has_expired()


class _Pool(httpcore2.ConnectionPool):
    """The connection pool of `bounded_transport`: its connections `_AnsweredOnceConnection`."""

    def create_connection(self, origin: httpcore2.Origin) -> httpcore2.ConnectionInterface:
        """httpcore's connection, checked for unasked answers before it is reused."""
        made = super().create_connection(origin)
        if type(made) is httpcore2.HTTPConnection:  # no proxy: always, for this pool
            made.__class__ = _AnsweredOnceConnection  # a subclass adding no state
        return made


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
    transport._pool = _Pool(
        ssl_context=tls_context(), max_connections=max_connections,
        max_keepalive_connections=max_connections, keepalive_expiry=keepalive_s,
        network_backend=_WatchedBackend())
    return transport
