"""A nats-py client that skips nats-py's per-message Python where it need not run.

`new_client()` makes a `FastClient`: nats-py's `Client` that reads header blocks with
`parse_headers` (what nats-py reads, one `str.split` per name), hands a subscription's
messages straight from the reader to a function (`deliver_now`: no queue, task or
callback coroutine per message), and queues a publish with a prebuilt `header_block`
without a coroutine (`publish_soon`): a lone message written to the socket at once,
queued ones by one callback per loop turn, nats-py's flusher task kept for whatever
would wait (a socket that is behind, a connection that is not up). `cluster.link`
builds its requests and a worker its answers on it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from wasmext.text import clean

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription

__all__ = ["header_block", "new_client", "parse_headers"]

# Bytes the socket may have left unsent before a flush waits for it (nats-py's flusher
# awaits the drain): asyncio's default high-water mark.
_WRITE_BEHIND = 64 * 1024


def parse_headers(raw: bytes) -> dict[str, str]:
    """A message's header lines as nats-py 2.16's `Client._parse_header_lines` reads
    them (same keys kept, dropped and decoded), with one `str.split` per name where it
    runs a Python generator over every character: the name check was half of a
    worker's header cost."""
    out: dict[str, str] = {}
    for line in raw.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        try:
            key = name.strip().decode("ascii")
        except UnicodeDecodeError:
            continue
        if key and key.split() != [key]:  # whitespace inside a name: not a header
            continue
        out[key] = value.strip().decode("utf-8", "replace")
    return out


_HEADER_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # nats-py 2.16's check
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_SUBJECT_BAD = re.compile(r"[ \t\r\n]")  # nats-py's: CR or LF would start another command


_GOOD_NAMES: set[str] = set()  # header names already checked (a few, sent on every request)
_GOOD_SUBJECTS: set[str] = set()  # subjects already checked (a stage's, sent to each time)


def _good_subject(subject: str) -> bool:
    """Whether nats-py would publish to `subject` (remembered: at most 1,024 of them)."""
    if not subject or _SUBJECT_BAD.search(subject):
        return False
    if len(_GOOD_SUBJECTS) < 1024:
        _GOOD_SUBJECTS.add(subject)
    return True


def header_block(headers: dict[str, str]) -> bytes:
    """The header block nats-py 2.16's `publish` writes for `headers` (the same names
    skipped and refused, values' line breaks made spaces), for a sender that reuses it
    or queues it with `publish_soon`: each name is checked once per process, the block
    encoded once, where nats-py runs a regex and three encodes per header."""
    parts = ["NATS/1.0\r\n"]
    for name, value in headers.items():
        if name not in _GOOD_NAMES:  # only names with nothing to strip are remembered
            key = name.strip()
            if not key:
                continue
            if not _HEADER_KEY.fullmatch(key):
                raise ValueError(f"not a header name: {clean(key, 64)}")
            if key == name and len(_GOOD_NAMES) < 256:  # from a caller: the set stays small
                _GOOD_NAMES.add(key)
            name = key
        value = value.strip()
        if "\r" in value or "\n" in value:
            value = value.translate(_NEWLINES)
        parts.append(f"{name}: {value}\r\n")
    parts.append("\r\n")
    return "".join(parts).encode()


_CLIENT_CLASS: list[type[Client]] = []  # made on first use: nats-py is imported lazily


def new_client() -> Client:
    """A nats-py client that reads headers with `parse_headers` and can queue a
    publish without a coroutine (`publish_soon`)."""
    if not _CLIENT_CLASS:
        from nats.aio.client import Client

        class FastClient(Client):
            _parse_header_lines = staticmethod(parse_headers)

            def __init__(self) -> None:
                super().__init__()
                self._now: dict[int, Callable[[Msg], None]] = {}
                self._flush_set = False  # a `_flush_now` is scheduled

            def deliver_now(self, sub: Subscription, handler: Callable[[Msg], None]) -> None:
                """Hand `sub`'s messages to `handler` as the reader parses them: no
                queue, task switch or callback coroutine per message. Status messages
                (a 503 "no responders"), and a subscription with a message limit or a
                JetStream one, keep nats-py's path: its callback gets them."""
                self._now[sub._id] = handler

            async def _process_msg(self, sid: int, subject: bytes, reply: bytes,
                                   data: bytes, headers: bytes | None) -> None:
                handler = self._now.get(sid)
                if handler is None or (headers is not None and headers[8:9] == b" "):
                    await super()._process_msg(sid, subject, reply, data,
                                               headers)  # type: ignore[arg-type]
                    return
                sub = self._subs.get(sid)
                if sub is None:  # unsubscribed: dropped, as nats-py drops it
                    del self._now[sid]
                    return
                if sub._max_msgs > 0 or sub._jsi is not None:
                    await super()._process_msg(sid, subject, reply, data,
                                               headers)  # type: ignore[arg-type]
                    return
                self.stats["in_msgs"] += 1
                self.stats["in_bytes"] += len(data)
                sub._received += 1
                # nats-py's reading of a block without a status line (`_process_headers`)
                hdr = (parse_headers(headers[10:]) or None) \
                    if headers is not None and len(headers) > 10 else None
                try:
                    handler(self._build_message(sid, subject, reply, data, hdr))
                except Exception as exc:  # as a callback's: the error callback hears it
                    await self._error_cb(exc)

            def publish_soon(self, subject: str, payload: bytes, block: bytes,
                             reply: str = "", *, alone: bool = False) -> bool:
                """Queue a message with a `header_block` for the flusher, as `publish`
                does when it need not wait; False (nothing queued) when it would wait
                or refuse: not connected, a full buffer, too large, a bad subject.
                `alone`: the sender expects no other message this turn of the loop
                (one request in flight), so it is written at once when nothing is
                queued before it and the socket is not behind, saving the loop a turn."""
                flusher, flushes = self._flusher_task, self._flush_queue
                if not self.is_connected or flusher is None or flusher.done() \
                        or flushes is None or len(payload) > self._max_payload \
                        or (subject not in _GOOD_SUBJECTS and not _good_subject(subject)) \
                        or (reply and _SUBJECT_BAD.search(reply)):
                    return False
                cmd = b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
                    subject.encode(), reply.encode(), len(block), len(block) + len(payload),
                    block, payload)
                if 0 < self._max_pending_size < self._pending_data_size + len(cmd):
                    return False
                self.stats["out_msgs"] += 1
                self.stats["out_bytes"] += len(payload)
                if alone and not self._pending:
                    writer = self._writer()
                    if writer is not None:
                        writer.write(cmd)
                        return True
                self._pending.append(cmd)
                self._pending_data_size += len(cmd)
                if not self._flush_set:  # one write for all queued before the loop turns
                    asyncio.get_running_loop().call_soon(self._flush_now)
                    self._flush_set = True
                return True

            def _writer(self) -> asyncio.StreamWriter | None:
                """The socket's writer when a write need not wait: connected over TCP or
                TLS (a websocket has its own queue) with the socket not behind."""
                writer: asyncio.StreamWriter | None = getattr(self._transport, "_io_writer",
                                                              None)
                if writer is None or not self.is_connected \
                        or writer.transport.get_write_buffer_size() >= _WRITE_BEHIND:
                    return None
                return writer

            def _flush_now(self) -> None:
                """Write what is queued, as nats-py's flusher task would, from a plain
                callback (the flusher's wake-up was a queue, a future and a task step
                per flush); the flusher still takes it whenever the socket is behind
                (it waits for the drain) or the connection is not up."""
                self._flush_set = False
                if not self._pending_data_size:
                    return
                writer = self._writer()
                if writer is not None:
                    writer.writelines(self._pending)
                    self._pending = []
                    self._pending_data_size = 0
                    return
                flushes = self._flush_queue
                if flushes is not None and flushes.empty():
                    flushes.put_nowait(asyncio.get_running_loop().create_future())

        _CLIENT_CLASS.append(FastClient)
    return _CLIENT_CLASS[0]()
