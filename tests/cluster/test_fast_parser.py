"""The fast client's parser (`HMSG` lines read without nats-py's regular expressions)
reads every stream as nats-py 2.16's `Parser` does: the same messages with the same
fields, in the same order, the same protocol errors, and the same bytes left waiting,
however the stream is cut into reads; lines not in nats-server's plain form (tabs,
runs of spaces, a line break inside, odd numbers) go to nats-py's reading."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

from wasmext.cluster import fastclient
from wasmext.cluster.fastclient import new_client


class _Recorder:
    """What the parser hands its client, in order (a client with no `deliver_now`
    handler: every message goes the way nats-py's `_process_msg` takes it)."""

    def __init__(self) -> None:
        self.got: list[tuple[Any, ...]] = []
        self._read_pending = False  # nothing a handler sent waits for the read's end

    async def _process_msg(self, *args: Any) -> None:
        self.got.append(("msg", *args))

    async def _process_ping(self) -> None:
        self.got.append(("ping",))

    async def _process_pong(self) -> None:
        self.got.append(("pong",))

    async def _process_info(self, info: Any) -> None:
        self.got.append(("info", info))

    async def _process_err(self, err: str) -> None:
        self.got.append(("err", err))

    def _take_now(self, *args: Any) -> object:
        return fastclient._NOT_NOW


class _Taker(_Recorder):
    """A client whose `deliver_now` handler takes sid 1's messages as they are read
    (recorded as nats-py's `_process_msg` would have got them), the rest left to it."""

    def _take_now(self, sid: int, subject: bytes, reply: bytes, data: bytes,
                  headers: bytes | None) -> object:
        if sid != 1:
            return fastclient._NOT_NOW
        self.got.append(("msg", sid, subject, reply, data, headers))
        return None


def _fast_parser() -> type[Parser]:
    return type(new_client()._ps)


async def _read(parser_class: type[Parser], reads: list[bytes],
                client_class: type[_Recorder] = _Recorder
                ) -> tuple[list[tuple[Any, ...]], bytes, int]:
    client = client_class()
    parser = parser_class(client)
    try:
        for data in reads:
            await parser.parse(data)
    except Exception as exc:  # nats-py's ProtocolError for what it cannot read
        client.got.append(("raised", type(exc).__name__))
    return client.got, bytes(parser.buf), parser.state


PLAIN = (b"HMSG a.b 1 _INBOX.x 12 17\r\nNATS/1.0\r\n\r\nhello\r\n"
         b"PING\r\n"
         b"MSG x 2 3\r\nabc\r\n"
         b"HMSG a.b 1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
         b"+OK\r\n"
         b"HMSG a.b 3 r.1 18 20\r\nNATS/1.0\r\nK: v\r\n\r\n\r\n\r\n")
ODD = (b"HMSG  a.b\t7  r.s   12 12\r\nNATS/1.0\r\n\r\n\r\n"  # tabs and runs of spaces
       b"HMSG s 3 12 14\r\n12\r\nNATS/1.0\r\n")  # a 4-field line nats-py may read as 5


def test_every_cut_of_a_stream_reads_as_nats_py_reads_it() -> None:
    fast = _fast_parser()

    async def run() -> int:
        compared = 0
        for stream in (PLAIN, ODD):
            for i in range(len(stream) + 1):
                for j in range(i, len(stream) + 1, 3):
                    reads = [stream[:i], stream[i:j], stream[j:]]
                    assert await _read(fast, reads) == await _read(Parser, reads), (i, j)
                    compared += 1
        return compared
    assert asyncio.run(run()) > 1000
    for cut in range(len(PLAIN) + 1):  # messages a handler takes, in their place
        reads = [PLAIN[:cut], PLAIN[cut:]]
        assert asyncio.run(_read(fast, reads, _Taker)) == asyncio.run(_read(Parser, reads))
    got, left, _state = asyncio.run(_read(fast, [PLAIN]))
    assert [g[0] for g in got] == ["msg", "ping", "msg", "msg", "msg"] and left == b""
    assert got[0] == ("msg", 1, b"a.b", b"_INBOX.x", b"hello", b"NATS/1.0\r\n\r\n")
    assert got[4] == ("msg", 3, b"a.b", b"r.1", b"\r\n", b"NATS/1.0\r\nK: v\r\n\r\n")


def test_a_large_message_over_many_reads_reads_as_nats_py_reads_it() -> None:
    """A payload that arrives over many reads, between messages a handler takes: the
    same messages, in order, and the same bytes and state left after every read."""
    big = bytes(range(256)) * 1024  # 256 KiB
    stream = (b"HMSG a.b 1 r.1 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"
              + b"HMSG a.b 1 r.2 12 %d\r\nNATS/1.0\r\n\r\n" % (12 + len(big)) + big
              + b"\r\nHMSG a.b 1 r.3 12 14\r\nNATS/1.0\r\n\r\nho\r\nPING\r\n")
    fast = _fast_parser()
    for step in (7_000, 65_536, 100_000):
        reads = [stream[i:i + step] for i in range(0, len(stream), step)]
        for client in (_Recorder, _Taker):
            assert asyncio.run(_read(fast, reads, client)) == asyncio.run(_read(Parser, reads))
        for cut in range(1, len(reads) + 1):  # the bytes left after each read
            got, left, state = asyncio.run(_read(fast, reads[:cut], _Taker))
            assert (got, left, state) == asyncio.run(_read(Parser, reads[:cut]))
    got, left, _state = asyncio.run(_read(fast, [stream], _Taker))
    assert [g[3] for g in got if g[0] == "msg"] == [b"r.1", b"r.2", b"r.3"]
    assert got[1][4] == big and left == b""


@pytest.mark.parametrize("line", [
    b"HMSG a 1 r\n12 14\r\n",  # a line break inside the line
    b"HMSG a 1 r\r12 14\r\n",
    b"HMSG a +1 12 14\r\n",  # a sid int() reads but the pattern's digits do not
    b"HMSG a 1 14 12\r\n",  # more header bytes than the whole message
    b"HMSG a 1 r 12 x14\r\n",
    b"HMSG a 1 2 3 12 14\r\n",  # one field too many
    b"HMSG a\r\n",
])
def test_a_line_not_in_nats_servers_form_is_read_as_nats_py_reads_it(line: bytes) -> None:
    stream = line + b"NATS/1.0\r\n\r\nhi\r\nPING\r\n"
    fast = _fast_parser()
    for cut in range(len(stream) + 1):
        reads = [stream[:cut], stream[cut:]]
        assert asyncio.run(_read(fast, reads)) == asyncio.run(_read(Parser, reads))


_SPACE = st.sampled_from([b" ", b"  ", b"\t", b" \t", b"\x0b", b" \x0c"])
_NUMBER = st.one_of(st.integers(0, 40).map(lambda n: str(n).encode()),
                    st.sampled_from([b"+1", b"-1", b"0x1", b"", b"99999999999999999999", b"1 2"]))
_WORD = st.sampled_from([b"a.b", b"_INBOX.x", b"r.1", b"s", b"12", b"\xff", b"a\rb", b"a\nb"])


@st.composite
def _hmsg_frames(draw: st.DrawFn) -> bytes:
    """An `HMSG` frame in nats-server's plain form, or bent: other whitespace, odd
    numbers, sizes that lie, a missing or extra field."""
    payload = draw(st.binary(max_size=24))
    header = draw(st.sampled_from([b"NATS/1.0\r\n\r\n", b"NATS/1.0\r\nK: v\r\n\r\n", b""]))
    hsize, size = len(header), len(header) + len(payload)
    numbers = [str(hsize).encode(), str(size).encode()]
    if draw(st.booleans()):  # sizes that do not match what follows
        numbers = [draw(_NUMBER), draw(_NUMBER)]
    fields = [draw(_WORD), draw(_NUMBER) if draw(st.booleans()) else b"1"]
    if draw(st.booleans()):
        fields.append(draw(_WORD))  # the reply subject
    fields.extend(numbers)
    sep = draw(_SPACE) if draw(st.integers(0, 3)) == 0 else b" "
    tail = draw(st.sampled_from([b"", b"", b"", b" ", b"\t"]))  # the size last, or not
    return b"HMSG " + sep.join(fields) + tail + b"\r\n" + header + payload + b"\r\n"


_FRAME = st.one_of(_hmsg_frames(), st.sampled_from([
    b"PING\r\n", b"PONG\r\n", b"+OK\r\n", b"MSG x 2 3\r\nabc\r\n",
    b"-ERR 'Stale Connection'\r\n", b"HMSG\r\n", b"\r\n"]))


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(_FRAME, min_size=1, max_size=5), data=st.data())
def test_any_stream_cut_anywhere_reads_as_nats_py_reads_it(frames: list[bytes],
                                                           data: st.DataObject) -> None:
    stream = b"".join(frames)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=3))
    points = sorted(set(cuts))
    reads = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    fast = _fast_parser()
    assert asyncio.run(_read(fast, reads)) == asyncio.run(_read(Parser, reads))
    assert asyncio.run(_read(fast, reads, _Taker)) == asyncio.run(_read(Parser, reads))


async def _read_in_callback(parser_class: type[Parser], reads: list[bytes],
                            client_class: type[_Recorder] = _Recorder
                            ) -> tuple[list[tuple[Any, ...]], bytes, int]:
    """`_read`, with each read first offered to `read_now` as the socket's callback
    offers it while the read loop waits (`FastClient._read_in_callback`): in nats-py's
    plain state it takes the run of messages its handlers take and hands back the rest
    for the read loop; in any other state the loop gets the whole read."""
    client = client_class()
    parser = parser_class(client)
    try:
        for data in reads:
            if parser.state == AWAITING_CONTROL_LINE:
                data = parser.read_now(data)  # type: ignore[attr-defined]
            if data:
                await parser.parse(data)
    except Exception as exc:
        client.got.append(("raised", type(exc).__name__))
    return client.got, bytes(parser.buf), parser.state


def test_reading_in_the_sockets_callback_reads_every_cut_as_nats_py_reads_it() -> None:
    """What the callback takes and what it leaves to the read loop, together, are read
    as nats-py reads the stream: the same messages in the same order, none twice, the
    same bytes and state left; a message for nats-py's path stops the callback's run and
    is read by the loop in its place."""
    fast = _fast_parser()
    for stream in (PLAIN, ODD):
        for i in range(len(stream) + 1):
            for j in range(i, len(stream) + 1, 5):
                reads = [stream[:i], stream[i:j], stream[j:]]
                for client in (_Recorder, _Taker):
                    assert asyncio.run(_read_in_callback(fast, reads, client)) == \
                        asyncio.run(_read(Parser, reads)), (i, j)
    # Read whole, the callback took the run of sid 1's message and left the rest.
    client = _Taker()
    parser = fast(client)
    rest = parser.read_now(PLAIN)  # type: ignore[attr-defined]
    assert len(client.got) == 1 and rest == PLAIN[PLAIN.index(b"PING"):]


@settings(max_examples=300, deadline=None)
@given(frames=st.lists(_FRAME, min_size=1, max_size=5), data=st.data())
def test_any_stream_read_in_the_callback_reads_as_nats_py_reads_it(
        frames: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frames)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=3))
    points = sorted(set(cuts))
    reads = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    fast = _fast_parser()
    for client in (_Recorder, _Taker):
        assert asyncio.run(_read_in_callback(fast, reads, client)) == \
            asyncio.run(_read(Parser, reads))
