"""A link's own request paths (a blocking `request` from threads, `arequest` on the
link's loop) keep nats-py's request/reply rules: each caller gets its own answer, a
timeout or no responder raises nats' errors within the bound, a late answer is dropped
and holds nothing, a closed link refuses at once; headers read as nats-py reads them."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from wasmext.cluster.link import NatsLink, connect, header_block, parse_headers

ODD_HEADERS = [
    b"Trace-Id: abc\r\nTenant-Id: default\r\nWasmext-Call-Id: 0f\r\n\r\n",
    b"a b: inner space\r\n\x1cX: file separator\r\n: empty name\r\nK\xff: bad name\r\n"
    b"V: \xff bad value\r\nno colon at all\r\n  Sp : padded \r\nT:\ttab\r\nC: a: b\r\n",
    b"", b"\r\n", b"Only:\r\n",
]


@pytest.mark.parametrize("raw", ODD_HEADERS)
def test_headers_read_exactly_as_nats_py_reads_them(raw: bytes) -> None:
    assert parse_headers(raw) == Client._parse_header_lines(raw)
    # The second reading takes the remembered names (kept and dropped alike).
    assert parse_headers(raw) == Client._parse_header_lines(raw)


def test_remembered_header_names_stay_bounded_under_a_flood() -> None:
    from wasmext.cluster import fastclient

    for i in range(1_000):
        raw = b"X-%d: v\r\nbad %d: w\r\n" % (i, i)
        assert parse_headers(raw) == Client._parse_header_lines(raw) == {f"X-{i}": "v"}
    assert len(fastclient._NAMES) <= 256


ANSWER_HEADERS = [
    {"Wasmext-Worker": "w1"},
    {"Content-Type": "application/msgpack", "Wasmext-Worker": "w-2"},
    {" Padded ": "  value with\r\nline breaks\n ", "": "skipped", "Plain": ""},
]


@pytest.mark.parametrize("reply", [None, "_INBOX.a.7"])  # an answer; a request
@pytest.mark.parametrize("headers", ANSWER_HEADERS)
def test_publish_soon_queues_exactly_what_nats_py_publish_writes(
        nats_url: str, headers: dict[str, str], reply: str | None) -> None:
    async def run() -> None:
        nc = await connect(nats_url, "soon")
        nc.hold_s = 60.0  # type: ignore[attr-defined]  # queued, however slow the machine
        try:
            written: list[bytes] = []
            send_command = nc._send_command

            async def capture(cmd: bytes, priority: bool = False) -> None:
                written.append(cmd)
                await send_command(cmd, priority)
            nc._send_command = capture  # type: ignore[method-assign]
            await nc.publish("_INBOX.x.y", b"body", reply=reply or "", headers=headers)
            pending = len(nc._pending)
            for _ in range(2):  # the second time, from the checked header names' memo
                assert nc.publish_soon("_INBOX.x.y", b"body",  # type: ignore[attr-defined]
                                       header_block(headers), reply or "")
            assert nc._pending[pending:] == written * 2  # byte for byte, for the flusher
            out = nc.stats["out_msgs"]
            # What publish would refuse or wait for is left to it: nothing is queued.
            assert not nc.publish_soon("bad subject", b"x", b"")  # type: ignore[attr-defined]
            assert not nc.publish_soon("_INBOX.x\r\nPUB", b"x", b"")  # type: ignore
            assert not nc.publish_soon("_INBOX.x", b"x", b"",  # type: ignore[attr-defined]
                                       "_INBOX.a\r\nPUB")  # a reply nats-py refuses
            assert not nc.publish_soon("_INBOX.x", b"x" * (nc.max_payload + 1),  # type: ignore
                                       b"")
            assert nc.stats["out_msgs"] == out
        finally:
            await nc.close()
        assert not nc.publish_soon("_INBOX.x", b"x", b"")  # type: ignore[attr-defined]

    asyncio.run(run())


def test_header_block_refuses_a_name_nats_py_refuses() -> None:
    for _ in range(2):  # the second time too: only good names are remembered
        with pytest.raises(ValueError, match="not a header name"):
            header_block({"Bad:Name": "v"})



class Echo:
    """A responder on the link's loop: answers with the body, after `delay_s`."""

    def __init__(self, link: NatsLink, subject: str, delay_s: float = 0.0) -> None:
        async def answer(msg: object) -> None:
            if delay_s:
                await asyncio.sleep(delay_s)
            await link.client.publish(msg.reply, msg.data,  # type: ignore[attr-defined]
                                      headers={"Echo": "1"})

        async def start() -> None:
            await link.client.subscribe(subject, cb=answer)
            await link.client.flush()
        link.run(start(), 5)


def test_threads_each_get_their_own_answer(nats_url: str) -> None:
    with NatsLink(nats_url, name="threads") as link:
        assert type(link.client)._parse_header_lines is parse_headers
        Echo(link, "link.echo")
        wrong: list[tuple[bytes, bytes]] = []

        def ask(k: int) -> None:
            for i in range(40):
                body = f"{k}-{i}".encode()
                msg = link.request("link.echo", body, {"Asked-By": str(k)}, 5)
                if msg.data != body or msg.headers != {"Echo": "1"}:
                    wrong.append((body, msg.data))
        threads = [threading.Thread(target=ask, args=(k,)) for k in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert wrong == []
        assert link._replies.waiting == {}  # every answer taken, nothing held


def test_a_blocking_request_times_out_and_its_late_answer_is_dropped(nats_url: str) -> None:
    with NatsLink(nats_url, name="late") as link:
        Echo(link, "link.slow", delay_s=0.6)
        Echo(link, "link.fast")
        started = time.monotonic()
        with pytest.raises(NatsTimeout):
            link.request("link.slow", b"x", {}, 0.2)
        assert time.monotonic() - started < 3
        assert link._replies.waiting == {}
        time.sleep(0.6)  # the late answer arrives and finds nobody
        assert link.request("link.fast", b"after", {}, 5).data == b"after"
        with pytest.raises(NoRespondersError):
            link.request("link.nobody", b"x", {}, 5)
        assert link._replies.waiting == {}


def test_a_closed_link_refuses_a_request_at_once(nats_url: str) -> None:
    link = NatsLink(nats_url, name="closed")
    link.close()
    started = time.monotonic()
    with pytest.raises(RuntimeError):
        link.request("link.echo", b"x", {}, 5)
    assert time.monotonic() - started < 3


async def _keeps_the_rules(link: NatsLink, echo: str, slow: tuple[str, bytes], nobody: str,
                           n: int) -> None:
    """`arequest`'s rules: `n` concurrent requests each get their own answer, a slow
    answer is nats' timeout within the time asked, and nobody listening is
    NoRespondersError."""
    bodies = [f"m{i}".encode() for i in range(n)]
    answers = await asyncio.gather(*(link.arequest(echo, b, {}, 5) for b in bodies))
    assert [m.data for m in answers] == bodies
    started = time.monotonic()
    with pytest.raises(NatsTimeout):
        await link.arequest(*slow, {}, 0.2)
    assert time.monotonic() - started < 3
    with pytest.raises(NoRespondersError):
        await link.arequest(nobody, b"x", {}, 5)


def test_arequest_on_the_links_own_loop_keeps_the_same_rules(nats_url: str) -> None:
    async def run() -> None:
        link = await NatsLink.open(nats_url, name="own")
        try:
            async def answer(msg: object) -> None:
                body = msg.data  # type: ignore[attr-defined]
                if body == b"slow":
                    await asyncio.sleep(0.6)
                await link.client.publish(msg.reply, body)  # type: ignore[attr-defined]
            await link.client.subscribe("own.echo", cb=answer)
            await link.client.flush()
            await _keeps_the_rules(link, "own.echo", ("own.echo", b"slow"), "own.nobody", 50)
            assert link._replies.waiting == {}
            await asyncio.sleep(0.6)  # the late answer is dropped
            assert (await link.arequest("own.echo", b"after", {}, 5)).data == b"after"
        finally:
            await link.aclose()
    asyncio.run(run())


def test_arequest_from_another_loop_goes_through_the_links_own(nats_url: str) -> None:
    with NatsLink(nats_url, name="other-loop") as link:
        Echo(link, "other.echo")
        Echo(link, "other.slow", delay_s=0.6)

        asyncio.run(_keeps_the_rules(link, "other.echo", ("other.slow", b"x"), "other.nobody",
                                     30))
        assert link._replies.waiting == {}
        time.sleep(0.6)  # the late answer finds nobody
        assert link.request("other.echo", b"after", {}, 5).data == b"after"


def test_a_link_closed_after_its_server_went_leaves_no_task_for_the_collector() -> None:
    """Closing a threaded link whose server is gone (its drain fails) still ends the
    subscriptions' and flusher's tasks on the link's loop before closing it: none is left
    pending for the garbage collector to close on a closed loop ("Event loop is closed"
    from their `finally`), and the link's thread ends."""
    from cluster_support import nats_server

    with nats_server() as (url, server):
        link = NatsLink(url, name="closed-after-server")
        link.run(link.client.subscribe("anything", cb=_ignore), 5.0)
        loop, thread = link._loop, link._thread
        assert len(asyncio.all_tasks(loop)) >= 3  # replies, this subscription, the flusher
        server.terminate()
        server.wait(10)
    started = time.monotonic()
    link.close()
    assert time.monotonic() - started < 10
    assert loop.is_closed() and thread is not None and not thread.is_alive()
    assert [t for t in asyncio.all_tasks(loop) if not t.done()] == []


async def _ignore(msg: object) -> None:
    """A subscription's callback with nothing to do."""
