"""The fast client's reads parsed in the socket's callback (`FastClient._read_in_callback`)
over a real socket cut anywhere: a worker answering stage requests and a caller's link
reading the answers through `chunking_proxy` (every byte alone, random sizes, at each
command's end, inside a message's line, header block, payload or closing CRLF) get every
answer right, once, for the request that asked; nats-py's own subscriptions on the same
connection (`describe`, `$SRV.PING`) keep answering among the stage requests; and after
a dropped connection both sides come back reading in the callback."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from chunking_proxy import ChunkingProxy, Plan, proxy_for
from cluster_support import (
    free_port,
    nats_server_binary,
    stage_request,
    stamp_host,
    wait_for_port,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.errors import FlushTimeoutError

from wasmext import Host, parse_policy
from wasmext.cluster.link import NatsLink
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.cluster.worker import Worker
from wasmext.loops import EVENT_LOOP_ENV, loop_factory, run_on

PREFIX = "chunked"
SUBJECT = f"{PREFIX}.ext.pre.stamp.v1"
POLICY = parse_policy({"pre": [{"id": "stamp", "mode": "required"}]})
REGISTRY = parse_registry({"stamp": {"type": "pre", "subject": SUBJECT, "timeout_ms": 10000}})
MODES = ["whole", "bytes", "random", "boundaries", "line", "header", "payload", "crlf"]


class InThread:
    """A Worker on its own event loop thread."""

    def __init__(self, worker: Worker, loop: str = "asyncio") -> None:
        self.worker = worker
        self.loop = loop_factory(loop)()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="chunked-worker")
        self.thread.start()
        self.call(worker.start())

    def call(self, coro: Any, timeout_s: float = 15) -> Any:
        """Run `coro` on the worker's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        """Drain the worker and end its loop."""
        try:
            self.call(self.worker.drain())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[Host]:
    with stamp_host(tmp_path) as host:
        yield host


@pytest.fixture(params=["asyncio", "uvloop"])
def event_loop_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each event loop wasmext runs a connection on (a threaded link's too)."""
    kind = str(request.param)
    if kind == "uvloop":
        pytest.importorskip("uvloop")
    monkeypatch.setenv(EVENT_LOOP_ENV, kind)
    return kind


@pytest.fixture
def proxied(nats_url: str, serving: Host,
            event_loop_kind: str) -> Iterator[tuple[ChunkingProxy, InThread]]:
    """A proxy in front of the session's server and a worker connected through it."""
    proxy = proxy_for(nats_url)
    worker = InThread(Worker(serving, proxy.url, prefix=PREFIX, name="chunked"),
                      event_loop_kind)
    worker.worker.url_upstream = nats_url  # type: ignore[attr-defined]
    try:
        yield proxy, worker
    finally:
        proxy.plan = Plan()
        proxy.stall_down.clear()
        worker.stop()
        proxy.close()


def answered_id(data: bytes) -> str:
    """The message id a stage's answer names."""
    return str(json.loads(data)["message"]["message_id"])


async def burst(link: NatsLink, tag: str, count: int) -> list[str]:
    """`count` requests in flight at once; the ids their answers name, in request order."""
    ids = [f"{tag}-{i}" for i in range(count)]
    answers = await asyncio.wait_for(asyncio.gather(*(
        link.arequest(SUBJECT, stage_request(i), {}, 10) for i in ids)), 30)
    return [answered_id(a.data) for a in answers]


def plans() -> st.SearchStrategy[Plan]:
    return st.builds(Plan, mode=st.sampled_from(MODES), size=st.integers(1, 300),
                     seed=st.integers(0, 2**16),
                     pause_s=st.sampled_from([0.0, 0.0, 0.0002, 0.001]))


def test_a_worker_and_a_link_read_answers_right_however_the_stream_is_cut(
        proxied: tuple[ChunkingProxy, InThread], serving: Host, event_loop_kind: str) -> None:
    """Bursts of requests in flight, the server's stream to the worker and to the
    caller's link cut by each plan hypothesis makes: every answer arrives once, naming
    the request that asked, in the order asked; `Router.arun` on the caller's loop and
    `Router.run` from threads (a threaded link) give the stage's answer."""
    proxy, worker = proxied
    worker_reads = callback_reads(worker.worker._nc)

    async def main() -> None:
        link = await NatsLink.open(proxy.url, name="chunked-caller")
        link_reads = callback_reads(link.client)
        router = Router(POLICY, RemoteCaller(REGISTRY, link))
        rounds = 0
        try:
            @settings(max_examples=12, deadline=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            @given(plan=plans(), count=st.integers(1, 24))
            def check(plan: Plan, count: int) -> None:
                nonlocal rounds
                rounds += 1
                proxy.plan = plan
                ids = asyncio.run_coroutine_threadsafe(
                    burst(link, f"r{rounds}", count), loop).result(40)
                assert ids == [f"r{rounds}-{i}" for i in range(count)]

            loop = asyncio.get_running_loop()
            await asyncio.to_thread(check)
            proxy.plan = Plan(mode="random", size=40, seed=7)
            with serving.session() as s:
                got = await asyncio.wait_for(router.arun(s, "hi", trace_id="t-chunked"), 20)
            assert got.message["payload"] == "stamped"
            # the path under test: both sides parsed reads in the socket's callback
            assert worker_reads and link_reads
        finally:
            await link.aclose()

    run_on(loop_factory(event_loop_kind), main())

    proxy.plan = Plan(mode="crlf", pause_s=0.0002)
    with NatsLink(proxy.url, name="chunked-threads") as threaded:
        router = Router(POLICY, RemoteCaller(REGISTRY, threaded))

        def one(i: int) -> str:
            with serving.session() as s:
                return str(router.run(s, f"hi {i}", trace_id=f"t-{i}").message["payload"])
        with ThreadPoolExecutor(8) as pool:
            assert list(pool.map(one, range(32), timeout=60)) == ["stamped"] * 32

def test_nats_py_subscriptions_among_stage_requests_in_one_read_all_answer(
        proxied: tuple[ChunkingProxy, InThread]) -> None:
    """Stage requests (the callback's), `describe`, `$SRV.PING` (nats-py's path) and
    cancels for no call, written in one go and cut by each plan: every request answered
    once, the stage answers naming their own request; then requests near the server's
    max_payload among small ones, read by nats-py's parser in its payload state."""
    proxy, worker = proxied

    async def main() -> None:

        nc, answers = await mix_listener(nats_url_of(worker))
        max_payload = nc.max_payload
        try:
            for round_no, mode in enumerate(MODES):
                proxy.plan = Plan(mode=mode, size=17, seed=round_no, pause_s=0.0002)
                await mixed_round(nc, answers, str(round_no), range(30))

            # Near max_payload: nats-py reads these in its payload state, in parts.
            proxy.plan = Plan(mode="random", size=5000, seed=3)
            big = max_payload - 4096
            tags = [f"big{i}" for i in range(9)]
            for i, tag in enumerate(tags):
                body = stage_request(tag, payload="y" * big) if i % 3 == 0 \
                    else stage_request(tag)
                await nc.publish(SUBJECT, body[:max_payload], reply=f"mix.reply.{tag}")
            await nc.flush()
            await until_answered(answers, len(tags), 30)
            assert sorted(answers) == sorted(tags)
            for tag in tags:
                assert [answered_id(b) for b in answers[tag]] == [tag]
        finally:
            await nc.close()

    asyncio.run(main())


async def mix_listener(url: str) -> tuple[Any, dict[str, list[bytes]]]:
    """A plain nats-py client hearing the mixed rounds' replies (`mix.reply.<id>`), and
    what it heard by id."""
    import nats

    nc = await nats.connect(url)
    answers: dict[str, list[bytes]] = {}

    async def heard(msg: Any) -> None:
        answers.setdefault(msg.subject.rsplit(".", 1)[-1], []).append(msg.data)
    await nc.subscribe("mix.reply.*", cb=heard)
    await nc.flush()
    return nc, answers


async def mixed_round(nc: Any, answers: dict[str, list[bytes]], round_tag: str,
                      kinds: Iterable[int]) -> None:
    """Requests of each kind in `kinds` (mod 5: 1 describe, 3 `$SRV.PING`, else a stage
    request, 4 followed by a cancel for no call) written in one go; each answered once,
    a stage answer naming its own request."""
    expected: dict[str, str] = {}
    for i, kind in enumerate(kinds):
        tag = f"{round_tag}x{i}"
        if kind % 5 == 1:
            await nc.publish(f"{PREFIX}.plugin.stamp.v1.describe", b"{}",
                             reply=f"mix.reply.{tag}")
            expected[tag] = "describe"
        elif kind % 5 == 3:
            await nc.publish("$SRV.PING.chunked-stamp", b"", reply=f"mix.reply.{tag}")
            expected[tag] = "ping"
        else:
            await nc.publish(SUBJECT, stage_request(tag), reply=f"mix.reply.{tag}",
                             headers={"K": "v"})
            expected[tag] = "stage"
        if kind % 5 == 4:
            await nc.publish(f"{PREFIX}.plugin.stamp.v1.cancel", b"no-such-call")
    await nc.flush()
    await until_answered(answers, len(expected), 20)
    await asyncio.sleep(0.05)  # a second answer to anything would be here now
    assert set(answers) == set(expected)
    for tag, what in expected.items():
        assert len(answers[tag]) == 1, (tag, what)
        body = answers[tag][0]
        if what == "stage":
            assert answered_id(body) == tag
        elif what == "ping":
            assert json.loads(body)["name"] == "chunked-stamp"
        else:
            assert b"stamp" in body
    answers.clear()


def nats_url_of(worker: InThread) -> str:
    """The server behind the proxy the worker uses (callers here connect directly)."""
    return worker.worker.url_upstream  # type: ignore[attr-defined,no-any-return]


async def until_answered(answers: dict[str, list[bytes]], count: int,
                         timeout_s: float) -> None:
    """Wait until `count` requests have answers, failing after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while len(answers) < count:
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


@contextmanager
def strict_server(folder: Path, port: int) -> Iterator[subprocess.Popen[Any]]:
    """A nats-server that flags a slow consumer soon: 2 MiB pending, a 1 s write deadline."""
    binary = nats_server_binary()
    if binary is None:
        pytest.skip("nats-server not installed")
    conf = folder / f"strict-{port}.conf"
    conf.write_text(f'listen: "127.0.0.1:{port}"\nmax_pending: 2MB\nwrite_deadline: "1s"\n')
    proc = subprocess.Popen([binary, "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def rss_bytes() -> int:
    """This process's resident memory now."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def flood(url: str, stop: asyncio.Event, body: bytes) -> int:
    """Stage requests (answered to a subject nobody hears) as fast as a client can
    write them, until `stop`; how many were written."""
    import nats

    nc = await nats.connect(url, reconnect_time_wait=0.05, max_reconnect_attempts=-1)
    sent = 0
    try:
        while not stop.is_set():
            for _ in range(200):
                try:
                    await nc.publish(SUBJECT, body, reply="flood.sink", headers={"K": "v"})
                    sent += 1
                except Exception:  # the server went away meanwhile: its restart
                    await asyncio.sleep(0.01)
            await asyncio.sleep(0)
    finally:
        await nc.close()
    return sent


def callback_reads(client: Any) -> list[int]:
    """From now, the size of each read `client` parses in the socket's callback."""
    parser = client._ps
    read_now = parser.read_now
    reads: list[int] = []

    def counted(data: bytes) -> bytes:
        reads.append(len(data))
        return read_now(data)  # type: ignore[no-any-return]
    parser.read_now = counted
    return reads


def settled(client: Any, timeout_s: float = 20) -> int:
    """Wait until `client` is connected and has not reconnected for a second (a flood's
    slow consumers are over); its reconnects. Fails after `timeout_s`: a reconnect loop."""
    deadline = time.monotonic() + timeout_s
    while True:
        reconnects = client.stats["reconnects"]
        time.sleep(1.0)
        if client.is_connected and client.stats["reconnects"] == reconnects:
            return int(reconnects)
        assert time.monotonic() < deadline, "still reconnecting"


def answers_right(link_url: str, tag: str, count: int = 40) -> None:
    """`count` requests in flight from a link of its own all answered, each for its own."""
    async def main() -> list[str]:
        link = await NatsLink.open(link_url, name=f"check-{tag}")
        try:
            return await burst(link, tag, count)
        finally:
            await link.aclose()
    assert asyncio.run(main()) == [f"{tag}-{i}" for i in range(count)]


@contextmanager
def worker_behind_proxy(folder: Path, host: Host, plan: Plan, name: str
                        ) -> Iterator[tuple[str, ChunkingProxy, Any, subprocess.Popen[Any]]]:
    """A worker of `host` reading a strict server (`strict_server`) through a proxy
    cutting its reads by `plan`, answering right before the test: (the server's own
    url, the proxy, the worker's client, the server's process)."""
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    with strict_server(folder, port) as server:
        proxy = proxy_for(url, plan)
        worker = InThread(Worker(host, proxy.url, prefix=PREFIX, name=name))
        try:
            answers_right(url, "before")
            client = worker.worker._nc
            assert client is not None
            yield url, proxy, client, server
        finally:
            worker.stop()
            proxy.close()


@pytest.mark.parametrize("stall", [True, False], ids=["stalled-reader", "flooded"])
def test_a_slow_consumer_flagged_mid_flood_comes_back_and_answers_right(
        tmp_path: Path, serving: Host, stall: bool) -> None:
    """A flood the worker's connection cannot take (the proxy stops reading it, or it
    just comes too fast, cut at random) until the server flags a slow consumer and
    closes it: the worker reconnects a bounded number of times, holds a bounded amount
    of memory, and answers every request right afterwards."""
    with worker_behind_proxy(tmp_path, serving, Plan(mode="random", size=3000, seed=5),
                             "chunked-slow") as (url, proxy, client, _server):
        rss_before = rss_bytes()

        async def drive() -> int:
            stop = asyncio.Event()
            task = asyncio.ensure_future(flood(url, stop, stage_request("f", "z" * 2000)))
            if stall:  # past the write deadline: the server closes the connection,
                proxy.stall_down.set()  # its FIN queued behind what the proxy holds
                await asyncio.sleep(3)
                proxy.stall_down.clear()
            deadline = time.monotonic() + (15 if stall else 3)
            while proxy.connections < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)  # the server closed it: the worker came back
            stop.set()
            return await asyncio.wait_for(task, 20)

        sent = asyncio.run(drive())
        assert sent > 1000
        if stall:
            assert proxy.connections >= 2, "the server never flagged the slow consumer"
        settled(client)
        answers_right(url, "after")
        assert settled(client) <= 10  # no reconnect loop
        assert rss_bytes() - rss_before < 400 * 2**20


def test_a_server_restart_mid_flood_leaves_the_worker_answering_right(
        tmp_path: Path, serving: Host) -> None:
    """The server stops while a flood is cut into the worker's reads at random (a
    message cut short by the end of the connection) and starts again on the same port:
    the worker comes back, settles once the flood is over, answers right, and its reads
    are parsed in the callback again (nothing of the old stream left in the parser)."""
    with worker_behind_proxy(tmp_path, serving, Plan(mode="random", size=700, seed=11),
                             "chunked-restart") as (url, proxy, client, first):
        port = int(url.rsplit(":", 1)[1])
        rss_before = rss_bytes()

        async def drive() -> None:
            stop = asyncio.Event()
            task = asyncio.ensure_future(flood(url, stop, stage_request("f", "z" * 300)))
            await asyncio.sleep(0.5)
            first.terminate()
            first.wait(10)
            await asyncio.sleep(0.3)
            with strict_server(tmp_path, port):
                deadline = time.monotonic() + 20
                while not (client.is_connected and client.stats["reconnects"]) \
                        and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.5)
                stop.set()
                await asyncio.wait_for(task, 20)
                await asyncio.to_thread(settled, client)
                await asyncio.to_thread(answers_right, url, "after")
                # Reads cut at random rarely end at a message's end, and nats-py's parser
                # keeps a run of reads that each end inside one (its payload state): read
                # whole, the first read of an idle worker is the callback's unless the
                # old stream left the parser inside a message.
                proxy.plan = Plan(mode="whole")
                reads = callback_reads(client)
                await asyncio.to_thread(answers_right, url, "after-whole")
                assert reads, "the new connection's reads all went to the read loop"
                assert await asyncio.to_thread(settled, client) <= 10

        asyncio.run(drive())
        assert rss_bytes() - rss_before < 400 * 2**20


def through_proxy(nats_url: str, event_loop_kind: str, name: str,
                  body: Callable[[Any, NatsLink, ChunkingProxy], Awaitable[None]]) -> None:
    """`body(responder, link, proxy)` on a loop of `event_loop_kind`: a plain nats-py
    client on the server to answer, and a link named `name` reading the server through
    a cutting proxy; all closed after."""
    proxy = proxy_for(nats_url)

    async def main() -> None:
        import nats

        responder = await nats.connect(nats_url)
        link = await NatsLink.open(proxy.url, name=name)
        try:
            await body(responder, link, proxy)
        finally:
            await link.aclose()
            await responder.close()

    try:
        run_on(loop_factory(event_loop_kind), main())
    finally:
        proxy.close()


def test_a_link_reads_answers_near_max_payload_among_small_ones_cut_anywhere(
        nats_url: str, event_loop_kind: str) -> None:
    """Answers up to the server's max_payload (nats-py's parser reads those in its
    payload state, part by part) among small ones, to one link, the stream cut at random
    and inside payloads: each request gets its own answer, once."""
    async def body(responder: Any, link: NatsLink, proxy: ChunkingProxy) -> None:
        limit = responder.max_payload

        async def echo(msg: Any) -> None:
            tag = msg.data.decode()
            filler = b"b" * (limit - 64) if tag.endswith("0") else b""
            await responder.publish(msg.reply, tag.encode() + b"|" + filler,
                                    headers={"T": tag})
        await responder.subscribe("chunked.echo", cb=echo)
        await responder.flush()
        for round_no, plan in enumerate([Plan(mode="random", size=9000, seed=1),
                                         Plan(mode="payload"), Plan(mode="crlf"),
                                         Plan(mode="bytes", size=4096)]):
            proxy.plan = plan
            tags = [f"{round_no}-{i}" for i in range(12)]
            answers = await asyncio.wait_for(asyncio.gather(*(
                link.arequest("chunked.echo", tag.encode(), {}, 20) for tag in tags)), 40)
            assert [a.data.split(b"|", 1)[0].decode() for a in answers] == tags
            assert [a.headers and a.headers.get("T") for a in answers] == tags
            assert all(len(a.data) > limit - 64 for a, t in zip(answers, tags, strict=True)
                       if t.endswith("0"))

    through_proxy(nats_url, event_loop_kind, "chunked-big", body)


@pytest.mark.slow
def test_a_sweep_of_cut_plans_over_mixed_traffic_answers_everything_once(
        proxied: tuple[ChunkingProxy, InThread]) -> None:
    """The slow tier's sweep: hypothesis over cut plans and request mixes, stage
    requests among nats-py's subscriptions' requests (and, in some, what nats-py cannot
    read from a peer just before them), every answer once and right."""
    proxy, worker = proxied

    async def main() -> None:

        nc, answers = await mix_listener(nats_url_of(worker))
        loop = asyncio.get_running_loop()
        rounds = 0
        try:
            @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
            @given(plan=plans(), kinds=st.lists(st.integers(0, 4), min_size=1, max_size=60),
                   hostile=st.booleans())
            def check(plan: Plan, kinds: list[int], hostile: bool) -> None:
                nonlocal rounds
                rounds += 1
                proxy.plan = plan
                if hostile:
                    raw_publish(nats_url_of(worker), hostile_messages())
                asyncio.run_coroutine_threadsafe(
                    mixed_round(nc, answers, f"s{rounds}", kinds), loop).result(60)

            await asyncio.to_thread(check)
        finally:
            await nc.close()

    asyncio.run(main())
    client = worker.worker._nc
    assert client is not None and client.stats["reconnects"] == 0


# Header blocks nats-server passes on unread, that nats-py 2.16's `_process_headers`
# raises on: a status line that is not UTF-8 (its bare decodes), a block no longer than
# its first line (it indexes the byte after it).
BAD_BLOCKS = [b"NATS/1.0 503 \xff\xfe\r\n\r\n", b"NATS/1.0 50\xff\r\n\r\n", b"NATS/1.0", b"x"]


def hpub(subject: bytes, block: bytes, payload: bytes, reply: bytes = b"hostile.reply"
         ) -> bytes:
    """An `HPUB` of raw bytes, as a peer on the bus may write it (nats-py writes only
    subjects and header blocks it checked)."""
    return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subject, reply, len(block),
                                              len(block) + len(payload), block, payload)


def raw_publish(url: str, commands: list[bytes]) -> None:
    """Write `commands` from a connection of their own in one write, and wait for the
    server to have read them."""
    host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), 5) as sock:
        sock.settimeout(5)
        sock.recv(4096)  # INFO
        sock.sendall(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\n'
                     + b"".join(commands) + b"PING\r\n")
        seen = b""
        while b"PONG" not in seen:
            got = sock.recv(4096)
            assert got, "the server closed the peer's connection"
            seen += got


def hostile_messages() -> list[bytes]:
    """What a peer on the bus may send a worker that nats-py 2.16's own reading raises on:
    header blocks (to a stage subject, whose status line sends it down nats-py's path,
    and to `describe`, a nats-py subscription), a reply subject that is not UTF-8 (to
    `describe` and `$SRV.PING`), a cancel subject's token that is not UTF-8."""
    stage, describe = SUBJECT.encode(), f"{PREFIX}.plugin.stamp.v1.describe".encode()
    body = stage_request("hostile")
    out = [hpub(subject, block, body) for block in BAD_BLOCKS for subject in (stage, describe)]
    out += [hpub(subject, b"NATS/1.0\r\n\r\n", b"{}", reply=b"\xff\xfe")
            for subject in (describe, b"$SRV.PING", stage)]
    out.append(hpub(f"{PREFIX}.plugin.\xff.v1.cancel".encode("latin-1"),
                    b"NATS/1.0\r\n\r\n", b"call"))
    out.append(b"PUB %s.plugin.st\xffmp.v1.cancel 4\r\ncall\r\n" % PREFIX.encode())
    return out


def test_what_nats_py_cannot_read_from_a_peer_leaves_the_worker_reading(
        proxied: tuple[ChunkingProxy, InThread]) -> None:
    """Messages from a peer on the bus that nats-py's own reading raises on
    (`hostile_messages`: header blocks, subjects and reply subjects that are not UTF-8),
    among stage requests, cut by each plan: the worker's read loop goes on (it ended,
    and the worker heard nothing until a stale ping, minutes later), and every stage
    request, describe and ping is answered right, at once."""
    proxy, worker = proxied
    client = worker.worker._nc
    assert client is not None
    upstream = nats_url_of(worker)
    reconnects = client.stats["reconnects"]

    async def main() -> None:

        nc, answers = await mix_listener(upstream)
        try:
            for round_no, mode in enumerate(["whole", "boundaries", "header", "bytes"]):
                proxy.plan = Plan(mode=mode, size=5, pause_s=0.0001)
                await asyncio.to_thread(raw_publish, upstream, hostile_messages())
                started = time.monotonic()
                await mixed_round(nc, answers, f"h{round_no}", range(10))
                assert time.monotonic() - started < 15
                assert client._reading_task is not None
                assert not client._reading_task.done(), "the worker's read loop ended"
                assert client.stats["reconnects"] == reconnects  # read past, not reconnected
        finally:
            await nc.close()

    asyncio.run(main())


def test_a_read_loop_ended_by_an_error_nats_py_did_not_expect_reconnects(
        proxied: tuple[ChunkingProxy, InThread]) -> None:
    """Whatever else nats-py's read loop raises on (here its PONG handling, made to fail
    once) ends the loop with the connection up: the fast client connects again, where
    nats-py waits for stale pings, minutes, hearing nothing; the worker answers after."""
    proxy, worker = proxied
    client = worker.worker._nc
    assert client is not None
    process_pong = client._process_pong
    failed: list[bool] = []

    async def failing_once() -> None:
        if not failed:
            failed.append(True)
            raise RuntimeError("a read nats-py did not expect")
        await process_pong()
    client._process_pong = failing_once
    before = client.stats["reconnects"]
    proxy.plan = Plan(mode="random", size=30, seed=2)
    with pytest.raises(FlushTimeoutError):  # the loop ended before its PONG
        worker.call(client.flush(timeout=2))
    assert failed
    deadline = time.monotonic() + 10
    while client.stats["reconnects"] == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.stats["reconnects"] == before + 1
    assert client._reading_task is not None and not client._reading_task.done()
    settled(client)
    answers_right(proxy.url, "after-error")


def test_a_read_loop_cancelled_with_its_loop_does_not_reconnect(nats_url: str) -> None:
    """A loop shutting down (as `asyncio.run` ends) cancels a connected client's read
    loop: that is not an end to mend, so no reconnect is started that would outlive the
    loop (a task destroyed pending)."""
    from wasmext.cluster.link import connect

    loop = asyncio.new_event_loop()
    try:
        client = loop.run_until_complete(connect(nats_url, "cancelled-with-its-loop"))
        assert client.is_connected
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        assert [t for t in asyncio.all_tasks(loop) if not t.done()] == []
        assert client.stats["reconnects"] == 0
    finally:
        loop.close()


def test_no_responders_among_answers_reach_their_own_requests_cut_anywhere(
        nats_url: str, event_loop_kind: str) -> None:
    """The server's "no responders" status messages (nats-py's path: the callback
    leaves them to the read loop) among answers (the callback's) in one read, cut by
    each plan: each served request gets its own answer, each unserved one
    NoRespondersError, none waits for its timeout."""
    async def body(responder: Any, link: NatsLink, proxy: ChunkingProxy) -> None:
        from nats.errors import NoRespondersError

        async def echo(msg: Any) -> None:
            await responder.publish(msg.reply, msg.data, headers={"T": "1"})
        await responder.subscribe("chunked.served", cb=echo)
        await responder.flush()
        for mode in MODES:
            proxy.plan = Plan(mode=mode, size=11, seed=4, pause_s=0.0002)
            started = time.monotonic()
            results = await asyncio.wait_for(asyncio.gather(*(
                link.arequest("chunked.served" if i % 3 else "chunked.nobody",
                              b"%d" % i, {}, 10) for i in range(30)),
                return_exceptions=True), 20)
            assert time.monotonic() - started < 8, "a refusal waited for its timeout"
            for i, result in enumerate(results):
                if i % 3:
                    assert not isinstance(result, BaseException), (mode, i, result)
                    assert result.data == b"%d" % i
                else:
                    assert isinstance(result, NoRespondersError), (mode, i, result)

    through_proxy(nats_url, event_loop_kind, "chunked-503", body)
