"""The caller's per-request shortcuts keep every rule they skip work for: a lone
request written at once never overtakes what is queued before it nor a socket that is
behind, a queued one is written by one callback per loop turn, a flush's PING never
overtakes a queued SUB, reply tokens stay unique
and unguessable, and the caller's per-extension shortcuts (`_Route`) follow stats and
breakers handed over after it was made (as `live` does on a reload)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from cluster_support import late_after_ping

from wasmext.cluster import fastclient
from wasmext.cluster.breaker import Breaker
from wasmext.cluster.callids import CallIds
from wasmext.cluster.contract import JSON, ExtMessage, ExtResponse, encode
from wasmext.cluster.link import NatsLink, connect, header_block
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller, RemoteStats

BLOCK = header_block({"Wasmext-Test": "1"})


async def _collect(nc: Any, subject: str) -> list[bytes]:
    got: list[bytes] = []

    async def take(msg: Any) -> None:
        got.append(msg.data)
    await nc.subscribe(subject, cb=take)
    await nc.flush()
    return got


async def _until(check: Any, timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


@asynccontextmanager
async def _sender_and_listener(nats_url: str, name: str, listener: str = "listener"
                               ) -> AsyncIterator[tuple[Any, Any]]:
    """A fast client named `name` and a second client to hear what it sends. Its hold
    is a minute, so what a test queues waits for the read's or turn's end however slow
    the machine (the hold has a test of its own)."""
    nc = await connect(nats_url, name)
    nc.hold_s = 60.0  # type: ignore[attr-defined]
    other = await connect(nats_url, listener)
    try:
        yield nc, other
    finally:
        await nc.close()
        await other.close()


async def _settled(nc: Any) -> None:
    """Nothing queued (the server's first PING is answered by a PONG nats-py queues)."""
    await nc.flush()
    await _until(lambda: not nc._pending)


def test_a_lone_message_is_written_at_once_but_never_ahead_of_one_queued(
        nats_url: str) -> None:
    async def run() -> None:
        async with _sender_and_listener(nats_url, "lone") as (nc, listener):
            got = await _collect(listener, "lone.order")
            await _settled(nc)
            assert nc.publish_soon("lone.order", b"1", BLOCK, alone=True)  # type: ignore
            assert nc._pending == []  # on the socket already: no loop turn, no flusher
            assert nc.publish_soon("lone.order", b"2", BLOCK)  # type: ignore
            assert nc.publish_soon("lone.order", b"3", BLOCK, alone=True)  # type: ignore
            assert len(nc._pending) == 2  # queued behind "2", not written ahead of it
            await asyncio.sleep(0)  # one turn: one callback writes both
            assert nc._pending == []
            await _until(lambda: len(got) == 3)
            assert got == [b"1", b"2", b"3"]

    asyncio.run(run())


def test_an_answer_to_an_inbox_is_not_remembered_and_bad_subjects_are_refused(
        nats_url: str) -> None:
    from wasmext.cluster import fastclient

    async def run() -> None:
        async with _sender_and_listener(nats_url, "once") as (nc, listener):
            got = await _collect(listener, "_INBOX.once.>")
            await _settled(nc)
            for i in range(3):  # a worker's answers, each to its request's own inbox
                assert nc.answer_soon(f"_INBOX.once.{i}", b"%d" % i, BLOCK)  # type: ignore
            await _until(lambda: len(got) == 3)
            assert got == [b"0", b"1", b"2"]
            assert not any(s.startswith("_INBOX.once.") for s in fastclient._GOOD_SUBJECTS)
            for bad in ("_INBOX.a b", "_INBOX.a\r\nPUB x 1", ""):  # refused
                assert not nc.publish_soon(bad, b"x", BLOCK)  # type: ignore
                assert bad not in fastclient._GOOD_SUBJECTS
            assert nc.publish_soon("stage.remembered", b"x", BLOCK)  # type: ignore
            assert "stage.remembered" in fastclient._GOOD_SUBJECTS

    asyncio.run(run())


def test_what_handlers_send_during_a_read_is_written_at_its_end_after_what_is_queued(
        nats_url: str) -> None:
    async def run() -> None:
        async with _sender_and_listener(nats_url, "answers") as (nc, listener):
            got = await _collect(listener, "answers.out")
            await _settled(nc)
            seen: list[tuple[bytes, int]] = []

            def handler(msg: Any) -> None:  # a worker's answer, sent while it is read
                assert nc.publish_soon("answers.out", msg.data, BLOCK)  # type: ignore
                seen.append((msg.data, len(nc._pending)))
            sub = await nc.subscribe("answers.in")
            nc.deliver_now(sub, handler)  # type: ignore[attr-defined]
            sid = sub._id
            await _settled(nc)  # the SUB is out: nothing queued
            assert nc.publish_soon("answers.out", b"queued", BLOCK)  # type: ignore
            # One read of two requests with headers (the fast reading), then one without (nats-py's)
            await nc._ps.parse(
                b"HMSG answers.in %d r.1 12 17\r\nNATS/1.0\r\n\r\nfirst\r\n"
                b"HMSG answers.in %d r.2 12 18\r\nNATS/1.0\r\n\r\nsecond\r\n" % (sid, sid))
            assert seen == [(b"first", 2), (b"second", 3)]  # queued while the read is parsed
            assert nc._pending == [] and not nc._in_handler  # one write at its end
            await nc._ps.parse(b"MSG answers.in %d r.3 4\r\nlast\r\n" % sid)
            assert seen[-1] == (b"last", 1) and nc._pending == []
            assert nc.publish_soon("answers.out", b"later", BLOCK)  # type: ignore
            assert len(nc._pending) == 1  # an ordinary publish queues as before
            await _until(lambda: len(got) == 5)
            assert got == [b"queued", b"first", b"second", b"last", b"later"]

    asyncio.run(run())


class _Clock:
    """A stand-in for the fast client's `perf_counter`: time moves when a test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _requests(sid: int, n: int) -> bytes:
    """One read of `n` stage requests (`a0`, `a1`, ...) for subscription `sid`."""
    return b"".join(b"HMSG held.in %d r.%d 12 14\r\nNATS/1.0\r\n\r\na%d\r\n" % (sid, i, i)
                    for i in range(n))


def test_what_waited_its_hold_is_written_before_a_long_read_or_turn_ends(
        nats_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(fastclient, "perf_counter", clock)

    async def run() -> None:
        async with _sender_and_listener(nats_url, "held") as (nc, listener):
            got = await _collect(listener, "held.out")
            nc.hold_s = 1.0
            sub = await nc.subscribe("held.in")
            await _settled(nc)
            took = 0.3
            seen: list[tuple[int, int]] = []  # queued when a handler began, and after it

            def handler(msg: Any) -> None:  # a worker's answer after `took` s of work
                before = len(nc._pending)
                clock.now += took
                assert nc.publish_soon("held.out", msg.data, BLOCK)  # type: ignore
                seen.append((before, len(nc._pending)))
            nc.deliver_now(sub, handler)  # type: ignore[attr-defined]
            # Short calls: the answers wait for the read's end until the oldest has
            # waited the hold (a0 at 0.3 s, a4 at 1.5 s), then go out together.
            await nc._ps.parse(_requests(sub._id, 6))
            assert seen == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 1)]
            assert nc._pending == []  # the last, at the read's end
            await _until(lambda: len(got) == 6)
            # Long calls: each answer is written before the next call begins.
            seen.clear()
            took = 2.0
            await nc._ps.parse(_requests(sub._id, 3))
            assert seen == [(0, 1), (0, 1), (0, 1)] and nc._pending == []
            await _until(lambda: len(got) == 9)
            assert got == [b"a%d" % i for i in range(6)] + [b"a0", b"a1", b"a2"]

            # A loop turn that queues messages with work between them does the same.
            assert nc.publish_soon("held.out", b"t0", BLOCK)  # type: ignore
            clock.now += 1.0
            assert nc.publish_soon("held.out", b"t1", BLOCK)  # type: ignore
            assert nc._pending == []  # both on the socket, no turn of the loop
            assert nc.publish_soon("held.out", b"t2", BLOCK)  # type: ignore
            clock.now += 0.9
            assert nc.publish_soon("held.out", b"t3", BLOCK)  # type: ignore
            assert len(nc._pending) == 2  # within the hold: they wait for the turn
            await asyncio.sleep(0)
            assert nc._pending == []
            await _until(lambda: len(got) == 13)
            assert got[9:] == [b"t0", b"t1", b"t2", b"t3"]

    asyncio.run(run())


def test_a_socket_that_is_behind_leaves_the_write_to_nats_pys_flusher(
        nats_url: str) -> None:
    async def run() -> None:
        async with _sender_and_listener(nats_url, "behind", "listener2") as (nc, listener):
            got = await _collect(listener, "behind.x")
            transport = nc._transport._io_writer.transport  # type: ignore[attr-defined]
            transport.get_write_buffer_size = lambda: 1 << 20  # as if 1 MiB were unsent
            await _settled(nc)
            assert nc.publish_soon("behind.x", b"a", BLOCK, alone=True)  # type: ignore
            assert len(nc._pending) == 1  # not written at once
            await asyncio.sleep(0)  # the callback hands it to the flusher, which drains
            await _until(lambda: got == [b"a"])
            assert nc._pending == []

    asyncio.run(run())


def test_a_flush_after_a_subscribe_returns_once_the_server_has_read_the_sub(
        nats_url: str) -> None:
    async def run() -> None:
        # The relay holds what the responder writes after a PING: a SUB written behind
        # the flush's PING would reach the server after the PONG and the request.
        async with late_after_ping(nats_url) as late_url:
            responder = await connect(late_url, "late-responder")
            asker = await connect(nats_url, "asker")
            try:
                async def echo(msg: Any) -> None:
                    await msg.respond(msg.data)
                await responder.subscribe("late.echo", cb=echo)
                await responder.flush()
                assert (await asker.request("late.echo", b"hi", timeout=5)).data == b"hi"
            finally:
                await responder.close()
                await asker.close()

    asyncio.run(run())


def test_reply_tokens_are_unique_and_carry_64_random_bits(nats_url: str) -> None:
    with NatsLink(nats_url, name="tokens") as one, NatsLink(nats_url, name="tokens2") as two:
        tokens = [one._replies._token() for _ in range(2000)]
        other = [two._replies._token() for _ in range(200)]
    assert len(set(tokens)) == len(tokens)
    for n, token in enumerate(tokens):
        count, random_part = f"{n:x}", token[len(f"{n:x}"):]
        assert token.startswith(count) and re.fullmatch(r"[0-9a-f]{16}", random_part)
    randoms = {t[-16:] for t in tokens} | {t[-16:] for t in other}
    assert len(randoms) == len(tokens) + len(other)  # no link repeats another's


def _answer(payload: str, headers: dict[str, str]) -> Any:
    body = encode(ExtResponse(ExtMessage("m", "chat", payload), {}), JSON)

    async def respond(msg: Any) -> None:
        await msg._client.publish(msg.reply, body, headers=headers)
    return respond


def test_a_caller_counts_on_stats_and_breakers_handed_over_after_it_was_made(
        nats_url: str) -> None:
    registry = parse_registry({"echoed": {"type": "pre", "subject": "route.echoed",
                                          "timeout_ms": 5000}})

    async def run() -> None:
        link = await NatsLink.open(nats_url, name="route")
        server = await connect(nats_url, "route-server")
        try:
            await server.subscribe("route.echoed", cb=_answer("done", {"Wasmext-Worker": "w9"}))
            await server.flush()
            caller = RemoteCaller(registry, link)
            ext, ids = registry["echoed"], CallIds("t", "default")
            data = {"message": {"payload": "x"}, "context": {}, "config": {}}
            answer, error = await caller.acall(ext, data, ids)
            assert error is None and answer["message"]["payload"] == "done"
            first = caller.stats["echoed"]
            handed, breaker = RemoteStats(), Breaker(1, 60)
            caller.stats["echoed"], caller.breakers["echoed"] = handed, breaker
            breaker.failed()  # handed over open: the call must see it
            answer, error = await caller.acall(ext, data, ids)
            assert answer is None and error == ("extension echoed: circuit open (1 failure"
                                                " in a row; a trial call in 60.0 s)")
            assert (handed.calls, handed.short_circuited, first.calls) == (1, 1, 1)
            caller.breakers["echoed"] = Breaker(5, 60)
            assert (await caller.acall(ext, data, ids))[1] is None
            assert (handed.calls, handed.ok, handed.by_worker) == (2, 1, {"w9": 1})
            assert (first.calls, first.ok, first.by_worker) == (1, 1, {"w9": 1})
        finally:
            await server.close()
            await link.aclose()

    asyncio.run(run())


@pytest.mark.parametrize(("headers", "reason"), [
    ({"Wasmext-Worker": "w\x1b[31m7", "Nats-Service-Error": "boom\r\nforged: 1",
      "Nats-Service-Error-Code": "500"}, "error 500: boom"),
    ({"Wasmext-Worker": "w\x1b[31m7", "Content-Type": "application/msgpack"},
     "answer is not the contract"),
])
def test_an_error_answer_counts_its_worker_once_and_fails_cleanly(
        nats_url: str, headers: dict[str, str], reason: str) -> None:
    registry = parse_registry({"bad": {"type": "pre", "subject": "route.bad",
                                       "timeout_ms": 5000, "retry": 2}})

    async def run() -> None:
        link = await NatsLink.open(nats_url, name="route-bad")
        server = await connect(nats_url, "route-bad-server")
        try:
            await server.subscribe("route.bad", cb=_answer("x", headers))
            await server.flush()
            caller = RemoteCaller(registry, link)
            answer, error = await caller.acall(
                registry["bad"], {"message": {"payload": "x"}}, CallIds("t", "default"))
            assert answer is None and error is not None and reason in error
            assert "\x1b" not in error and "\n" not in error  # sanitised
            stats = caller.stats["bad"]
            # Not retried (an error answer would come back the same); counted once.
            assert (stats.calls, stats.failed, stats.ok, stats.retries) == (1, 1, 0, 0)
            assert list(stats.by_worker.values()) == [1]
            assert "\x1b" not in next(iter(stats.by_worker))
        finally:
            await server.close()
            await link.aclose()

    asyncio.run(run())


def test_call_ids_cannot_be_changed() -> None:
    ids = CallIds("t", "tenant", 1.0, 3)
    with pytest.raises(AttributeError):
        ids.trace_id = "other"  # type: ignore[misc]
    assert (ids.trace_id, ids.tenant_id, ids.deadline, ids.calls_left) == ("t", "tenant", 1.0, 3)
    assert CallIds("t", "tenant").deadline is None
