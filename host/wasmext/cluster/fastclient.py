"""A nats-py client that skips nats-py's per-message Python where it need not run.

`new_client()` makes a `FastClient`: nats-py's `Client` that reads header blocks with
`parse_headers` (what nats-py reads, each name read once per process), hands a subscription's
messages straight from the reader to a function (`deliver_now`: no queue, task or
callback coroutine per message), and queues a publish with a prebuilt `header_block`
without a coroutine (`publish_soon`): a lone message written to the socket at once,
what `deliver_now` handlers send while a read is parsed written at its end in one
write, other queued ones by one callback per loop turn, nats-py's flusher task kept for
whatever would wait (a socket that is behind, a connection that is not up). A queued
message waits for that write at most `HOLD_S` (and what a handler sent is written
before the next handler runs when the last ran that long): a long read or turn is
written in parts, so the peer works on the first while this side works on the rest.
Its parser reads a message with headers (`HMSG`: every stage request and answer)
without nats-py's regular expressions and hands it to a `deliver_now` handler without a
coroutine; any other line goes to nats-py's parser. While nats-py's read loop waits
with nothing unread, a read is parsed in the socket's own callback (`read_now`) and the
loop gets only what follows the run of messages the handlers took: a read without the
loop's second turn, a future and a task switch (issue 25's thirteenth round: a worker's
CPU per request one at a time 161 -> 149 us, docs/performance.md). A PING (`flush`) is
queued behind what is pending, where nats-py writes it ahead: its PONG proves the server
has read every SUB before it, so a worker is ready only once a caller on another
connection can reach it.
`cluster.link` builds its requests and a worker its answers on it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Literal

from wasmext.text import clean

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription

__all__ = ["HOLD_S", "header_block", "new_client", "parse_headers"]

# How long a queued message may wait for the end of the read or loop turn that queued
# it. Sixteen requests in flight arrive as one read (and their answers as one): written
# only at its end, the whole read's answers wait for its last one while the peer idles,
# and the two sides take turns instead of working at once. Written in parts of about
# this much work each, they overlap; much shorter parts cost a write and a wake-up per
# message. Issue 25's eighth round: 250 us moved 16-in-flight throughput on 2 cores
# from about 0.6x to 0.7-0.78x a bare echo (docs/performance.md).
HOLD_S = 250e-6

# Bytes the socket may have left unsent before a flush waits for it (nats-py's flusher
# awaits the drain): asyncio's default high-water mark.
_WRITE_BEHIND = 64 * 1024


def parse_headers(raw: bytes) -> dict[str, str]:
    """A message's header lines as nats-py 2.16's `Client._parse_header_lines` reads
    them (same keys kept, dropped and decoded), with each name read once per process
    (`_header_name`) where it runs a Python generator over every character: the name
    check was half of a worker's header cost, and the same few names come every time."""
    out: dict[str, str] = {}
    names = _NAMES
    for line in raw.split(b"\r\n"):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        key = names.get(name)
        if key is None:
            key = _header_name(name)
        if key is not False:
            out[key] = value.strip().decode("utf-8", "replace")
    return out


_NAMES: dict[bytes, str | Literal[False]] = {}  # a header line's name: its key, or not one


def _header_name(name: bytes) -> str | Literal[False]:
    """The key nats-py reads for a header line's `name`, or False when it drops the line
    (not ASCII, whitespace inside); remembered for at most 256 names, since names come
    off the network."""
    try:
        key: str | Literal[False] = name.strip().decode("ascii")
    except UnicodeDecodeError:
        key = False
    if key and key.split() != [key]:  # whitespace inside a name: not a header
        key = False
    if len(_NAMES) < 256:
        _NAMES[name] = key
    return key


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


_PING = b"PING\r\n"
_NOT_NOW = object()  # `_take_now`: not a message it hands over
_MAX_LINE = 4096  # nats-py's MAX_CONTROL_LINE_SIZE
# A byte that could let nats-py's pattern read a 5-field `HMSG` line another way (its
# `\s+` may run past the line's end into digits): such a message goes to nats-py.
_AMBIGUOUS = frozenset(b"0123456789 \t\r\n\x0b\x0c")


def _hmsg(buf: bytes, at: int, end: int) -> tuple[bytes, int, bytes, int, int] | None:
    """(subject, sid, reply, header bytes, total bytes) of the `HMSG` line from `at` to
    `end`, or None when it is not in the plain form nats-server writes (fields split by
    whitespace, numbers plain digits): nats-py's pattern reads those, as before."""
    line = buf[at + 5:end]
    # nats-py's pattern keeps the reply on one line. (An int: `bytes in bytes` first
    # tries the operand as an int and formats a TypeError.)
    if 10 in line or 13 in line:
        return None
    if not line[-1:].isdigit():  # the pattern wants the size's digits right before CRLF
        return None
    parts = line.split()
    if len(parts) == 5:
        subject, sid, reply, hsize, size = parts
    elif len(parts) == 4:
        subject, sid, hsize, size = parts
        reply = b""
        after = buf[end + 2:end + 3]
        if after and after[0] in _AMBIGUOUS:
            return None
    else:
        return None
    if not (sid.isdigit() and hsize.isdigit() and size.isdigit()):
        return None
    header_size, total = int(hsize), int(size)
    if header_size > total:
        return None
    return subject, int(sid), reply, header_size, total


# nats-py 2.16's `Msg` fields, in order (`FastClient._msg`)
_MSG_FIELDS = ("_client", "subject", "reply", "data", "headers", "_metadata", "_ackd", "_sid")
_CLIENT_CLASS: list[type[Client]] = []  # made on first use: nats-py is imported lazily


def new_client() -> Client:
    """A nats-py client that reads headers with `parse_headers` and can queue a
    publish without a coroutine (`publish_soon`)."""
    if not _CLIENT_CLASS:
        from nats.aio.client import Client
        from nats.errors import ProtocolError
        from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

        class FastParser(Parser):
            """nats-py's parser, with a message that has headers (`HMSG`, every request
            and answer of a stage call) read without its regular expressions and handed
            to a `deliver_now` handler without a coroutine. Anything else, or a line
            not in the form nats-server writes, goes to nats-py's `parse`, which reads
            it as before."""

            async def parse(self, data: bytes = b"") -> None:
                nc: FastClient = self.nc
                try:
                    await self._parse(data)
                finally:  # what handlers sent while it was read: one write, no loop turn
                    if nc._read_pending:
                        nc._end_of_read()

            async def _parse(self, data: bytes) -> None:
                buf = self.buf
                buf.extend(data)
                nc: FastClient = self.nc
                while (left := self._take_run()) is not None:
                    taken, sid, subject, reply, payload, hdr = left
                    if nc._read_pending:  # nothing sent waits on what follows
                        nc._end_of_read()
                    if isinstance(taken, Exception):  # as a callback's: the error callback
                        await nc._error_cb(taken)
                    else:  # not one for a handler (asks `_take_now` again: a rare message)
                        await nc._process_msg(sid, subject, reply, payload, hdr)
                if buf:
                    if nc._read_pending:  # nothing sent waits on nats-py's reading
                        nc._end_of_read()
                    await super().parse()

            def read_now(self, data: bytes) -> bytes:
                """Read `data` outside the read loop, which waits with nothing unread
                (`FastClient._read_in_callback`): the run of `HMSG`s at its start goes to
                their handlers and what they sent is written; what is left (another
                command, a message for nats-py's path, one not all here) is returned for
                the read loop, in order, since nothing comes before it."""
                buf = self.buf
                buf.extend(data)
                nc: FastClient = self.nc
                try:
                    self._take_run(now=True)
                finally:
                    if nc._read_pending:
                        nc._end_of_read()
                rest = bytes(buf)
                buf.clear()
                return rest

            def _take_run(self, now: bool = False
                          ) -> tuple[object, int, bytes, bytes, bytes, bytes | None] | None:
                """Hand the `HMSG`s at the buffer's start to their `deliver_now` handlers
                and cut them from it; the first one that needs an await (`_take_now`'s
                answer, then its fields), or None at anything else. The messages are read
                from one `bytes` copy of the buffer by offset: each field is one slice of
                it, and the buffer is cut once per run, not once per message. `now`:
                nothing may be awaited (`read_now`), so a message for nats-py's path stays
                in the buffer, and a handler's exception goes to the error callback in a
                task of its own."""
                buf = self.buf
                nc: FastClient = self.nc
                # Not an `HMSG` this parser reads (nats-py's reads a large message's
                # payload as it arrives, in its own state): no copy of the buffer.
                if self.state != AWAITING_CONTROL_LINE or not buf.startswith(b"HMSG "):
                    return None
                view = bytes(buf)
                at, size_all = 0, len(view)
                try:
                    while at < size_all and self.state == AWAITING_CONTROL_LINE \
                            and view.startswith(b"HMSG ", at):
                        end = view.find(b"\r\n", at, at + _MAX_LINE)
                        if end < 0:
                            return None
                        msg = _hmsg(view, at, end)
                        if msg is None:
                            return None
                        subject, sid, reply, header_size, size = msg
                        if size_all < end + 4 + size:  # the payload is not all here yet
                            return None
                        start = end + 2
                        hdr = view[start:start + header_size] if header_size > 0 else None
                        payload = view[start + header_size:start + size]
                        began, at = at, start + size + 2
                        taken = nc._take_now(sid, subject, reply, payload, hdr)
                        if taken is None:
                            continue
                        if not now:
                            return taken, sid, subject, reply, payload, hdr
                        if taken is _NOT_NOW:
                            at = began
                            return None
                        asyncio.get_running_loop().create_task(
                            nc._error_cb(taken))  # type: ignore[arg-type]
                    return None
                finally:
                    del buf[:at]

        class FastClient(Client):
            _parse_header_lines = staticmethod(parse_headers)
            hold_s = HOLD_S  # how long a queued message waits for its read's or turn's end
            # nats-py's `Msg` takes its fields in this order: `_take_now` makes it with
            # them positionally where `_build_message` names them (a keyword call and a
            # frame less per message: a worker's requests, a caller's answers); another
            # order goes by keyword, as does a client given another `msg_class`.
            _msg = Client.msg_class if dataclasses.is_dataclass(Client.msg_class) and tuple(
                f.name for f in dataclasses.fields(Client.msg_class)) == _MSG_FIELDS else None

            def __init__(self) -> None:
                super().__init__()
                self._ps = FastParser(self)
                self._now: dict[int, Callable[[Msg], None]] = {}
                self._flush_set = False  # a `_flush_now` is scheduled
                # A `deliver_now` handler runs (in the reader): what it sends is queued
                # for the end of the read (`_read_pending`), which writes it all at once.
                self._in_handler = False
                self._read_pending = False
                self._timed: list[bytes] | None = None  # the `_pending` list timed
                self._queued_at = 0.0  # when its oldest command was queued
                self._handler_began = 0.0  # when the last `deliver_now` handler began

            async def _read_loop(self) -> None:
                self._read_in_callback()
                await super()._read_loop()  # (returns when cancelled too)
                task = asyncio.current_task()
                cancelling = getattr(task, "cancelling", None)  # Python 3.11 and later
                if cancelling is not None and cancelling():
                    return  # a loop shutting down, not a connection to mend
                if self.is_connected:  # (a close or reconnect changes the status first)
                    # nats-py's loop ends on an exception it did not expect (logged
                    # "encountered error") with the connection still up and unread: it
                    # would wait for a stale ping, minutes, hearing nothing. Whatever
                    # ended it, a new connection reads again.
                    await self._process_op_err(ProtocolError())

            def _read_in_callback(self) -> None:
                """Read what arrives in the socket's callback while the read loop waits
                with nothing unread (`FastParser.read_now`), and give the loop only what
                needs it: one turn of the loop and a task switch less per read."""
                reader = getattr(self._transport, "_io_reader", None)
                writer = getattr(self._transport, "_io_writer", None)
                if reader is None or writer is None:
                    return
                transport = writer.transport
                protocol = transport.get_protocol()
                # asyncio's own stream classes, whose waiter and buffer say the loop waits
                # with nothing unread (any other: every read goes to the loop, as before)
                if type(protocol) is not asyncio.StreamReaderProtocol \
                        or type(reader) is not asyncio.StreamReader \
                        or not hasattr(reader, "_waiter") or not hasattr(reader, "_buffer"):
                    return
                fed = protocol.data_received
                parser = self._ps
                assert isinstance(parser, FastParser)

                def data_received(data: bytes) -> None:
                    if reader._waiter is None or reader._buffer \
                            or parser.state != AWAITING_CONTROL_LINE:
                        fed(data)
                        return
                    rest = parser.read_now(data)
                    if rest:
                        fed(rest)

                protocol.data_received = data_received  # type: ignore[method-assign]
                transport.set_protocol(protocol)  # uvloop reads the method once per set

            def deliver_now(self, sub: Subscription, handler: Callable[[Msg], None]) -> None:
                """Hand `sub`'s messages to `handler` as the reader parses them: no
                queue, task switch or callback coroutine per message. Status messages
                (a 503 "no responders"), and a subscription with a message limit or a
                JetStream one, keep nats-py's path: its callback gets them."""
                self._now[sub._id] = handler

            async def _process_msg(self, sid: int, subject: bytes, reply: bytes,
                                   data: bytes, headers: bytes | None) -> None:
                taken = self._take_now(sid, subject, reply, data, headers)
                if self._read_pending:  # nats-py's reading: written now, message by message
                    self._end_of_read()
                if taken is None:
                    return
                if isinstance(taken, Exception):  # as a callback's: the error callback hears it
                    await self._error_cb(taken)
                else:
                    await super()._process_msg(sid, subject, reply, data,
                                               headers)  # type: ignore[arg-type]

            async def _process_headers(self, headers: bytes | None
                                       ) -> dict[str, str] | None:
                """nats-py's reading of a message's header block, or None (the error
                callback told) for one it raises on. Any peer on the bus may send a
                block nats-server passes on unread: nats-py 2.16 decodes a status line
                without a fallback and indexes the byte after `NATS/1.0`, and what it
                raises here ends its read loop for good, the connection still counted
                up: a worker deaf until a stale ping reconnects it, minutes later."""
                try:
                    return await super()._process_headers(headers)
                except (UnicodeDecodeError, IndexError) as exc:
                    await self._error_cb(exc)
                    return None

            def _build_message(self, sid: int, subject: bytes, reply: bytes, data: bytes,
                               headers: dict[str, str] | None) -> Msg | None:
                """nats-py's message, or None (its `_process_msg` drops it) when the
                subject or reply subject is not UTF-8: a peer on the bus chooses both
                (a reply subject always, a subject's tokens on a wildcard subscription:
                a worker's cancels, an inbox), and nats-py's bare decode raising there
                ends its read loop for good, the connection still counted up."""
                try:
                    return super()._build_message(  # type: ignore[no-any-return]
                        sid, subject, reply, data, headers)
                except UnicodeDecodeError:
                    return None

            def _take_now(self, sid: int, subject: bytes, reply: bytes, data: bytes,
                          headers: bytes | None) -> Exception | object | None:
                """Hand a message to its `deliver_now` handler: None when it did, what
                the handler raised, or `_NOT_NOW` (nothing done: nats-py's path takes it)."""
                handler = self._now.get(sid)
                if handler is None or (headers is not None and headers[8:9] == b" "):
                    return _NOT_NOW
                sub = self._subs.get(sid)
                if sub is None:  # unsubscribed: dropped, as nats-py drops it
                    del self._now[sid]
                    return None
                if sub._max_msgs > 0 or sub._jsi is not None:
                    return _NOT_NOW
                stats = self.stats
                stats["in_msgs"] += 1
                stats["in_bytes"] += len(data)
                sub._received += 1
                # nats-py's reading of a block without a status line (`_process_headers`)
                hdr = (parse_headers(headers[10:]) or None) \
                    if headers is not None and len(headers) > 10 else None
                began = perf_counter()
                if self._read_pending and began - self._handler_began >= self.hold_s:
                    # The last handler ran a hold or more: this one may as well, so what
                    # it sent is written before it runs rather than after.
                    self._end_of_read()
                self._handler_began = began
                self._in_handler = True
                try:
                    # (nats-py's own `_build_message`: a subject that is not UTF-8 raises
                    # here, heard by the error callback, as the positional call's does)
                    msg_class = self.msg_class
                    handler(msg_class(self, subject.decode(), reply.decode(), data, hdr, None,
                                      False, sid) if msg_class is self._msg else
                            Client._build_message(self, sid, subject, reply, data, hdr))
                except Exception as exc:
                    return exc
                finally:
                    self._in_handler = False
                return None

            def answer_soon(self, reply: str, payload: bytes, block: bytes) -> bool:
                """`publish_soon` for an answer to `reply`, the reply subject of a message
                this client read: its parser took it as a run of bytes without
                whitespace, so it needs no check (and is not remembered: a request's
                inbox is used once, and would fill the table of stage subjects)."""
                if not self._can_queue(payload):
                    return False
                size, head = len(payload), len(block)
                cmd = b"HPUB %s %d %d\r\n%s%s\r\n" % (
                    reply.encode(), head, head + size, block, payload)
                return self._queue_cmd(cmd, size, False)

            def publish_soon(self, subject: str, payload: bytes, block: bytes,
                             reply: str = "", *, alone: bool = False) -> bool:
                """Queue a message with a `header_block` for the flusher, as `publish`
                does when it need not wait; False (nothing queued) when it would wait
                or refuse: not connected, a full buffer, too large, a bad subject.
                `alone`: the sender expects no other message this turn of the loop
                (one request in flight), so it is written at once when nothing is
                queued before it and the socket is not behind, saving the loop a turn.
                Sent from a `deliver_now` handler (a worker's answer), it is written when
                the reader has parsed what it read, with everything the read's handlers
                sent and whatever was queued before: one write per read, and no turn of
                the loop (one at a time, the answer's whole wait for that turn). Either
                way, a message that finds what is queued waiting `hold_s` (`HOLD_S`)
                already is written at once with it."""
                if not self._can_queue(payload) \
                        or (subject not in _GOOD_SUBJECTS and not _good_subject(subject)) \
                        or (reply and _SUBJECT_BAD.search(reply)):
                    return False
                size, head = len(payload), len(block)
                cmd = b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
                    subject.encode(), reply.encode(), head, head + size, block, payload)
                return self._queue_cmd(cmd, size, alone)

            def _can_queue(self, payload: bytes) -> bool:
                """Whether a publish may be queued without waiting: connected, the
                flusher running, the payload within the server's limit."""
                flusher = self._flusher_task
                return self.is_connected and flusher is not None and not flusher.done() \
                    and self._flush_queue is not None and len(payload) <= self._max_payload

            def _queue_cmd(self, cmd: bytes, size: int, alone: bool) -> bool:
                """Queue (or write at once: `publish_soon`) a checked command of a
                `size`-byte payload; False when nats-py's pending buffer would overflow."""
                length = len(cmd)
                if 0 < self._max_pending_size < self._pending_data_size + length:
                    return False
                stats = self.stats
                stats["out_msgs"] += 1
                stats["out_bytes"] += size
                pending = self._pending
                held = False
                if not pending or pending is not self._timed:
                    if alone and not pending and not self._in_handler:
                        writer = self._writer()
                        if writer is not None:
                            writer.write(cmd)
                            return True
                    # A list written since was replaced (here and in nats-py's flusher):
                    # one this client has not timed holds nats-py's commands, timed now.
                    self._timed = pending
                    self._queued_at = perf_counter()
                else:
                    held = perf_counter() - self._queued_at >= self.hold_s
                pending.append(cmd)
                self._pending_data_size += length
                if held:  # what is queued waited a hold: written with this one, now
                    if self._in_handler:
                        self._end_of_read()
                    else:
                        self._write_pending()
                elif self._in_handler:  # the reader writes it at the end of this read
                    self._read_pending = True
                elif not self._flush_set:  # one write for all queued before the loop turns
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

            def _end_of_read(self) -> None:
                """Write what the reader's handlers sent (and whatever was queued before
                it), in order, in one write, without waiting for a turn of the loop."""
                self._read_pending = False
                self._write_pending()

            async def _send_ping(self, future: asyncio.Future[bool] | None = None
                                 ) -> None:
                """A PING (`flush`, the keep-alive) queued behind what is pending, not
                written ahead of it as nats-py 2.16 writes it: its PONG must mean the
                server has read every command sent before, or a `subscribe` then
                `flush` returns while the SUB still waits for the flusher, and a
                request from another connection meets "no responders"."""
                if not self.is_connected:  # nats-py's: a PING queued now would outlive
                    await super()._send_ping(future)  # the connection it was meant for
                    return
                self._pongs.append(future if future is not None
                                   else asyncio.get_running_loop().create_future())
                self._pending.append(_PING)
                self._pending_data_size += len(_PING)
                self._write_pending()

            def _flush_now(self) -> None:
                """Write what is queued, as nats-py's flusher task would, from a plain
                callback (the flusher's wake-up was a queue, a future and a task step
                per flush)."""
                self._flush_set = False
                self._write_pending()

            def _write_pending(self) -> None:
                """Write what is queued now; the flusher takes it whenever the socket is
                behind (it waits for the drain) or the connection is not up."""
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
