"""A redis-py connection whose every wait is bounded by the calling hook's deadline.

Each connect, send and read takes its socket timeout from
`wasmext.state.deadline.remaining()`, so a frozen server (SIGSTOP, a network
partition) makes a state op fail with `StateUnavailable` when the call's time is
up instead of stalling it. A read that timed out drops the connection (its reply
may still come), and the next operation connects again: nothing to restart when
the server is back.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from wasmext.state.base import StateUnavailable
from wasmext.state.deadline import remaining

__all__ = ["BoundedConnection", "bounded_client"]


class BoundedConnection(redis.Connection):
    """`socket_timeout` is the default bound; a call's deadline shortens it."""

    def _left(self) -> float:
        return remaining(float(self.socket_timeout or 5.0))

    def connect(self) -> None:
        """Connect, with the handshake bounded by the call's deadline."""
        if self._sock:
            return
        # The handshake after connecting (HELLO, CLIENT SETINFO) reads through the
        # parser with the socket's own timeout: bound it by the deadline too.
        bound = self.socket_timeout
        self.socket_connect_timeout = self.socket_timeout = self._left()
        try:
            super().connect()  # type: ignore[no-untyped-call]
        finally:
            self.socket_timeout = bound
        if self._sock is not None:
            self._sock.settimeout(bound)

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        """Send a command with the socket timeout set to the time left."""
        left = self._left()
        if self._sock is not None:
            self._sock.settimeout(left)
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]

    def read_response(self, disable_decoding: bool = False, **kwargs: Any) -> Any:
        """Read a reply within the time left; drops the connection when none is left."""
        try:
            left = self._left()
        except StateUnavailable:
            self.disconnect()  # type: ignore[no-untyped-call]  # a reply is owed on this connection: never reuse it
            raise
        kwargs["timeout"] = left
        # The parser reads the rest of a reply with the socket's own timeout, and
        # restores its buffer's `socket_timeout` after each read: bound both.
        buffer = getattr(self._parser, "_buffer", None)
        if buffer is not None and hasattr(buffer, "socket_timeout"):
            buffer.socket_timeout = left
        if self._sock is not None:
            self._sock.settimeout(left)
        return super().read_response(disable_decoding, **kwargs)


def bounded_client(url: str, timeout: float) -> redis.Redis:
    """A client for `url` whose waits are bounded by `timeout` and by the call's deadline;
    no hidden retries (a timed-out call must not be sent again behind the caller's back)."""
    return redis.Redis.from_url(url, connection_class=BoundedConnection, socket_timeout=timeout,
                                socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))
