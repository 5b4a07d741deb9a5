"""One JetStream key-value bucket over a nats-py connection on a private event loop.

The store is synchronous (plugin calls block a thread); nats-py is asyncio. A
`Bucket` runs the client on its own loop thread and waits for each operation at
most `wasmext.state.deadline.remaining()`: a stalled or unreachable server makes
a state op fail with `StateUnavailable` when the calling hook's time is up. The
connection is made on first use (a host starts while NATS is down; its state
ops answer `unavailable` until NATS is back) and then reconnects by itself. A forked
child has neither the loop's thread nor a connection of its own: it starts both on
first use, and never writes to or closes the parent's (their socket is shared).

Documents are read with direct gets (one request each, several at once in one
`gather`) and written with JetStream's atomic batch publish (ADR-50, nats-server
2.12 or later): every message of a batch carries the revision it expects its key
to have (`Nats-Expected-Last-Subject-Sequence`, 0 for "absent"), and the server
applies all of them or none.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from wasmext.forks import renew_in_children
from wasmext.loops import new_event_loop, stop_in_thread
from wasmext.state.base import StateUnavailable
from wasmext.state.deadline import remaining
from wasmext.text import clean, redact_url

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext

__all__ = ["Bucket", "Doc", "Write"]

T = TypeVar("T")
log = logging.getLogger("wasmext.state.jetstream")

KV_OPERATION = "KV-Operation"
MARKER_TTL = "60s"  # how long a deleted key's marker stays in the stream
_WRONG_LAST_SEQUENCE = 10071  # JSStreamWrongLastSequenceErrF: an expectation failed
_BATCH_LIMIT = 1000  # messages per atomic batch (nats-server's own limit)
# What a forked child inherited and must leave alone: collected, a loop or client
# could close what the parent still uses (its selector's registrations, its socket).
_ABANDONED: list[object] = []


@dataclass(frozen=True)
class Doc:
    """A key's current value (None: absent or deleted) and revision (0: never written)."""

    value: bytes | None
    revision: int


@dataclass(frozen=True)
class Write:
    """One message of a batch: the new value (None: delete) if the key is at `expect`
    (None: whatever its revision)."""

    key: str
    value: bytes | None
    expect: int | None


class Bucket:
    """A KV bucket (created on first use, with atomic batches allowed) of one server."""

    def __init__(self, url: str, bucket: str, *, options: Mapping[str, Any] | None = None,
                 secrets: Sequence[str] = (), timeout: float = 5.0, replicas: int = 1,
                 storage: str = "file", name: str = "wasmext-state") -> None:
        self.url, self.bucket, self.timeout = url, bucket, timeout
        self._options = dict(options or {})
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._replicas, self._storage, self._name = replicas, storage, name
        self._stream = f"KV_{bucket}"
        self._prefix = f"$KV.{bucket}."
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._connecting: asyncio.Lock | None = None
        self._seen: list[str] = []  # errors of the last connection attempt, redacted
        self._restart = threading.Lock()
        self._start_loop()
        renew_in_children(self)

    def _start_loop(self) -> None:
        self._loop = new_event_loop()  # uvloop where installed (wasmext.loops)
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name=f"jetstream:{self.bucket}", daemon=True)
        self._thread.start()
        self._forked = False

    def _after_fork(self) -> None:
        """In a forked child: the loop's thread is the parent's, so is the connection.
        The child's own loop starts on first use (not in the fork's hook), then connects."""
        if self._loop.is_closed():
            return
        _ABANDONED.extend((self._loop, self._thread, self._nc, self._js))
        self._nc = self._js = None
        self._connecting = None
        self._forked = True
        self._restart = threading.Lock()

    # -- running on the loop, within the call's deadline ------------------------------

    def said(self, exc: BaseException) -> str:
        """An exception's text for an operator: credentials redacted, cleaned, capped."""
        text = redact_url(str(exc) or type(exc).__name__)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return clean(text)

    def run(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        """Run `coro` on the loop; StateUnavailable if it fails or outlives the deadline."""
        try:
            left = remaining(self.timeout)
        except StateUnavailable:
            coro.close()
            raise
        if self._forked:
            with self._restart:
                if self._forked:
                    self._start_loop()
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        except RuntimeError:  # the loop is closed
            coro.close()
            raise StateUnavailable(f"jetstream {redact_url(self.url)}: the store is closed"
                                   ) from None
        try:
            return future.result(left)
        except concurrent.futures.TimeoutError:
            future.cancel()
            seen = self._seen[-1] if self._nc is None and self._seen else ""
            why = f" (connecting: {seen})" if seen else ""
            raise StateUnavailable(f"jetstream {redact_url(self.url)}: no answer to {what}"
                                   f" within {left:.3g} s{why}") from None
        except StateUnavailable:
            raise
        except Exception as exc:  # nats errors, OSError, a refused login: the host's trouble
            raise StateUnavailable(f"jetstream {redact_url(self.url)}: {what}:"
                                   f" {self.said(exc)}") from None

    async def _client(self) -> tuple[Client, JetStreamContext]:
        if self._nc is not None and self._js is not None and not self._nc.is_closed:
            return self._nc, self._js
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._nc is None or self._js is None or self._nc.is_closed:
                await self._connect()
            assert self._nc is not None and self._js is not None
            return self._nc, self._js

    async def _connect(self) -> None:
        import nats

        seen = self._seen = []  # what went wrong while connecting (the server's reason first)

        async def quiet(exc: Exception) -> None:  # nats-py logs a traceback per attempt
            if len(seen) < 8:
                seen.append(self.said(exc))
            log.debug("jetstream state %s: %s", redact_url(self.url), self.said(exc))

        try:
            nc = await nats.connect(self.url, name=self._name, connect_timeout=self.timeout,
                                    allow_reconnect=True, max_reconnect_attempts=1,
                                    reconnect_time_wait=0.2, error_cb=quiet, **self._options)
        except Exception as exc:
            # A refused login is followed by "no servers": the refusal is the news.
            refused = any("authorization violation" in e.lower() for e in seen) or \
                "authorization violation" in str(exc).lower()
            reason = "authorization failed (the server refused the login)" if refused else ""
            raise StateUnavailable(f"jetstream {redact_url(self.url)}: cannot connect: "
                                   f"{reason or self.said(exc)}") from None
        # Once in, never give up on the server: ops fail with `unavailable` meanwhile.
        nc.options["max_reconnect_attempts"] = -1
        js = nc.jetstream(timeout=self.timeout)
        try:
            await self._ensure_bucket(nc, js)
        except BaseException:
            await nc.close()
            raise
        self._nc, self._js = nc, js

    async def _ensure_bucket(self, nc: Client, js: JetStreamContext) -> None:
        from nats.js.api import DiscardPolicy, StorageType, StreamConfig
        from nats.js.errors import NotFoundError

        try:
            info = await js.stream_info(self._stream)
        except NotFoundError:
            # A key-value bucket's stream (as nats-py's create_key_value makes it), with
            # everything this store needs set at once: updating a fresh stream restarts
            # its direct-get responders, and a read sent meanwhile is lost.
            info = await js.add_stream(StreamConfig(
                name=self._stream, subjects=[f"{self._prefix}>"], allow_direct=True,
                allow_rollup_hdrs=True, allow_msg_ttl=True, allow_atomic=True,
                deny_delete=True, discard=DiscardPolicy.NEW, duplicate_window=120.0,
                max_consumers=-1, max_msgs=-1, max_msgs_per_subject=1,
                num_replicas=self._replicas, storage=StorageType(self._storage)))
        c = info.config
        if not (c.allow_atomic and c.allow_direct and c.allow_msg_ttl):
            # reads from any replica, the atomic batch commits, and deletion markers
            # that expire (else every session ever ended would leave one for good)
            c.allow_atomic = c.allow_direct = c.allow_msg_ttl = True
            await js.update_stream(c)
            info = await js.stream_info(self._stream)
        if not (info.config.allow_atomic and info.config.allow_msg_ttl):
            # A server before 2.12 drops the setting and would store a batch's messages
            # one by one: refuse rather than commit without atomicity.
            raise StateUnavailable(f"jetstream {redact_url(self.url)}: nats-server"
                                   f" {nc.connected_server_version}"
                                   " has no atomic batch publish (2.12 or later needed)")
        await self._direct_ready(nc)

    async def _direct_ready(self, nc: Client) -> None:
        """Wait (briefly) until the stream answers direct gets: a new or updated stream's
        responders come up just after it does, and a read sent before is lost."""
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.errors import NotFoundError

        for _ in range(100):
            try:
                msg = await nc.request(f"$JS.API.DIRECT.GET.{self._stream}.{self._prefix}u",
                                          b"", timeout=0.25)
            except (NoRespondersError, NatsTimeout, NotFoundError):
                await asyncio.sleep(0.02)
                continue
            if msg.headers is None or msg.headers.get("Status") in (None, "404"):
                return
            await asyncio.sleep(0.02)

    # -- reads ------------------------------------------------------------------------

    async def _get(self, js: JetStreamContext, key: str) -> Doc:
        from nats.js.errors import NotFoundError

        try:
            msg = await js.get_msg(self._stream, subject=self._prefix + key, direct=True)
        except NotFoundError:
            return Doc(None, 0)
        headers = msg.headers or {}
        if headers.get(KV_OPERATION) in ("DEL", "PURGE"):
            return Doc(None, int(msg.seq or 0))
        return Doc(bytes(msg.data or b""), int(msg.seq or 0))

    def get_many(self, keys: Sequence[str]) -> list[Doc]:
        """The current documents of `keys`, read concurrently (one round trip's time)."""
        async def read() -> list[Doc]:
            _, js = await self._client()
            return list(await asyncio.gather(*(self._get(js, k) for k in keys)))
        return self.run(read(), "read") if keys else []

    def list_keys(self, pattern: str) -> list[str]:
        """Keys matching the subject pattern (`*` one token) that hold a value now."""
        async def listing() -> list[str]:
            _, js = await self._client()
            info = await js.stream_info(self._stream, subjects_filter=self._prefix + pattern)
            subjects = sorted((info.state.subjects or {}) if info.state else {})
            keys = [s[len(self._prefix):] for s in subjects]
            docs = await asyncio.gather(*(self._get(js, k) for k in keys))
            return [k for k, d in zip(keys, docs, strict=True) if d.value is not None]
        return self.run(listing(), "listing keys")

    # -- writes -----------------------------------------------------------------------

    def commit(self, writes: Sequence[Write]) -> bool:
        """Apply every write or none (one atomic batch); False if a key no longer had the
        revision it expects (another host committed first: plan again)."""
        if not writes:
            return True
        if len(writes) > _BATCH_LIMIT:
            raise StateUnavailable(f"jetstream: one commit would write {len(writes)} keys, over"
                                   f" the server's atomic batch limit of {_BATCH_LIMIT}")
        return self.run(self._batch(writes), "commit")

    async def _batch(self, writes: Sequence[Write]) -> bool:
        nc, _ = await self._client()
        batch = uuid.uuid4().hex
        last = len(writes)
        for i, w in enumerate(writes, 1):
            headers = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(i)}
            if w.expect is not None:
                headers["Nats-Expected-Last-Subject-Sequence"] = str(w.expect)
            if w.value is None:
                headers[KV_OPERATION] = "DEL"
                headers["Nats-TTL"] = MARKER_TTL
            if i < last:
                await nc.publish(self._prefix + w.key, w.value or b"", headers=headers)
                continue
            headers["Nats-Batch-Commit"] = "1"
            reply = await nc.request(self._prefix + w.key, w.value or b"", headers=headers,
                                     timeout=self.timeout)
            if not _acked(reply.data):
                return False
            ack = json.loads(reply.data)
            if ack.get("batch") != batch or ack.get("count") != last:
                raise StateUnavailable(f"jetstream: the server acknowledged {clean(repr(ack))}"
                                       f" for a batch of {last}: not an atomic commit")
            return True
        return True  # not reached: the last write commits

    def put(self, key: str, value: bytes, expect: int | None) -> bool:
        """One write outside a batch (not synced to disk at once); False if `key` is no
        longer at revision `expect` (None: write whatever its revision)."""
        headers = {} if expect is None else {"Nats-Expected-Last-Subject-Sequence": str(expect)}

        async def publish() -> bool:
            nc, _ = await self._client()
            reply = await nc.request(self._prefix + key, value, timeout=self.timeout,
                                     headers=headers or None)
            return _acked(reply.data)
        return self.run(publish(), "refresh")

    @property
    def max_payload(self) -> int:
        """The largest message the server takes (known once connected; 1 MiB before)."""
        nc = self._nc
        return int(nc.max_payload) if nc is not None and nc.max_payload else 1024 * 1024

    def connect(self) -> None:
        """Connect now (and create the bucket if needed) instead of on first use."""
        self.run(self._client(), "connecting")

    def close(self) -> None:
        """Drain the connection and stop the loop."""
        if self._loop.is_closed():
            return
        if self._forked:  # the parent's: nothing of the child's to drain or stop
            self._loop = asyncio.new_event_loop()
            self._loop.close()
            self._forked = False
            return

        async def drain() -> None:
            if self._nc is not None and not self._nc.is_closed:
                await self._nc.drain()

        future = asyncio.run_coroutine_threadsafe(drain(), self._loop)
        try:
            future.result(5.0)
        except Exception:  # closing: the server may already be gone
            future.cancel()
        stop_in_thread(self._loop, self._thread)


def _acked(data: bytes) -> bool:
    """True for a publish acknowledgement, False for a failed revision expectation;
    StateUnavailable for anything else the server said."""
    try:
        ack = json.loads(data)
    except ValueError:
        raise StateUnavailable(f"jetstream: not a publish acknowledgement: {clean(repr(data))}"
                               ) from None
    error = ack.get("error") if isinstance(ack, dict) else None
    if error is None:
        return True
    if isinstance(error, dict) and error.get("err_code") == _WRONG_LAST_SEQUENCE:
        return False
    text = error.get("description", error) if isinstance(error, dict) else error
    raise StateUnavailable(f"jetstream refused the commit: {clean(str(text))}")
