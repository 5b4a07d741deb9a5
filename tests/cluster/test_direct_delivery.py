"""Messages handed straight from the reader (`FastClient.deliver_now`) and requests
queued for the flusher with their reply subject (`publish_soon`) keep nats-py's rules:
the same message fields, status answers (no responders) through the callback, a
failing handler heard by the error callback without losing the connection; a worker's
stage endpoints count their requests in `$SRV.STATS` and answer a host bug with a 500;
an awaited request's shared timer never fires early and holds nothing afterwards."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_support import (
    free_port,
    late_after_ping,
    nats_server,
    stage_request,
    wat_plugin,
)
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from wasmext import Host, HostConfig
from wasmext.cluster.link import TICK_S, NatsLink, connect
from wasmext.cluster.worker import Worker
from wasmext.runtime import Runtime


def test_direct_delivery_gives_the_fields_nats_py_gives_and_survives_a_failing_handler(
        nats_url: str) -> None:
    async def run() -> None:
        errors: list[BaseException] = []
        nc = await connect(nats_url, "direct")
        plain = Client()
        await plain.connect(nats_url)
        try:
            async def heard(exc: Exception) -> None:
                errors.append(exc)
            nc._error_cb = heard  # type: ignore[assignment]
            by_callback: list[Any] = []
            directly: list[Any] = []

            async def callback(msg: Any) -> None:
                by_callback.append(msg)
            sub = await nc.subscribe("direct.x", cb=callback)
            seen = await plain.subscribe("direct.x", cb=callback)

            def handler(msg: Any) -> None:
                if msg.data == b"boom":
                    raise RuntimeError("handler failed")
                directly.append(msg)
            nc.deliver_now(sub, handler)  # type: ignore[attr-defined]
            await nc.flush()
            await plain.flush()
            for body, headers in ((b"one", {"A": "1", "B": " two "}), (b"two", None),
                                  (b"boom", None), (b"after", {"C": "3"})):
                await plain.publish("direct.x", body, reply="r.1", headers=headers)
            await plain.flush()
            deadline = time.monotonic() + 5
            while (len(directly) < 3 or len(by_callback) < 4) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            # nats-py's own message class, made with the fields `_build_message` gives
            assert all(type(m) is Msg and m._client is nc and m._sid == sub._id
                       and m._metadata is None and m._ackd is False for m in directly)
            fields = [(m.subject, m.reply, m.data, m.headers) for m in directly]
            # The plain client's own subscription got the same four through nats-py.
            assert fields == [(m.subject, m.reply, m.data, m.headers) for m in by_callback
                              if m.data != b"boom"]
            assert fields[0][3] == {"A": "1", "B": "two"} and fields[1][3] is None
            assert [str(e) for e in errors] == ["handler failed"]  # heard, not fatal
            assert nc.is_connected and seen.delivered == 4 and sub.delivered == 4
            await sub.unsubscribe()
            await plain.publish("direct.x", b"gone")
            await plain.flush()
            await nc.flush()
            assert len(directly) == 3
        finally:
            await plain.close()
            await nc.close()
    asyncio.run(run())


def test_no_responders_still_reaches_an_awaited_request_and_timers_never_fire_early(
        nats_url: str) -> None:
    async def run() -> None:
        link = await NatsLink.open(nats_url, name="ticks")
        try:
            with pytest.raises(NoRespondersError):  # a status answer: nats-py's path
                await link.arequest("ticks.nobody", b"x", {"H": "1"}, 0.3)
            async def silent(msg: Any) -> None:
                pass
            await link.client.subscribe("ticks.silent", cb=silent)
            await link.client.flush()
            for timeout_s in (0.05, 0.12, 0.2):
                started = time.monotonic()
                with pytest.raises(NatsTimeout):
                    await link.arequest("ticks.silent", b"x", {}, timeout_s)
                took = time.monotonic() - started
                assert timeout_s <= took < timeout_s + 2.0  # never early; late by load only
            # A burst answered at once: its tick holds no future, and fired ticks are gone.
            async def echo(msg: Any) -> None:
                await link.client.publish(msg.reply, msg.data)
            await link.client.subscribe("ticks.echo", cb=echo)
            await link.client.flush()
            answers = await asyncio.gather(*(link.arequest("ticks.echo", b"%d" % i, {}, 30)
                                             for i in range(40)))
            assert [m.data for m in answers] == [b"%d" % i for i in range(40)]
            assert link._replies.waiting == {}
            due = link._replies._due
            assert sum(map(len, due.values())) == 40  # tokens only: none is waiting
            now = asyncio.get_running_loop().time()
            assert all(tick * TICK_S > now for tick in due)  # the silent ones' have fired
        finally:
            await link.aclose()
    asyncio.run(run())




def stamp_request(message_id: str) -> bytes:
    return stage_request(message_id, extension="stamp")


@pytest.mark.parametrize("inline_below_ms", [60_000, 0])
def test_a_worker_counts_directly_delivered_requests_and_answers_a_host_bug_with_500(
        nats_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        inline_below_ms: int) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    wat_plugin(plugins, "stamp", "pre", {"message": {"payload": "stamped", "metadata": {}}})
    subject = "direct.ext.pre.stamp.v1"

    async def run(host: Host) -> None:
        worker = Worker(host, nats_url, prefix="direct", name="d1",
                        inline_below_ms=inline_below_ms)
        await worker.start()
        import nats

        nc = await nats.connect(nats_url)
        try:
            for i in range(5):
                msg = await nc.request(subject, stamp_request(f"m{i}"), timeout=10)
                assert json.loads(msg.data)["message"]["payload"] == "stamped"
            stats = json.loads((await nc.request("$SRV.STATS.direct-stamp", b"",
                                                 timeout=5)).data)
            served = {e["subject"]: e for e in stats["endpoints"]}[subject]
            assert served["num_requests"] == 5 and served["data"]["answered"] == 5

            def broken(*args: Any) -> Any:
                raise KeyError("a host bug")
            monkeypatch.setattr(worker, "_take", broken)
            msg = await nc.request(subject, stamp_request("bug"), timeout=10)
            assert msg.headers is not None and msg.headers["Nats-Service-Error-Code"] == "500"
            assert "a host bug" in msg.headers["Nats-Service-Error"]
            monkeypatch.undo()
            msg = await nc.request(subject, stamp_request("healthy"), timeout=10)
            assert json.loads(msg.data)["message"]["payload"] == "stamped"  # still serving
        finally:
            await nc.close()
            await worker.drain()

    with Host(HostConfig(), runtime=Runtime(cache=False),
              plugin_dirs=[("workspace", plugins)]) as host:
        asyncio.run(run(host))


def test_a_started_worker_answers_a_request_from_another_connection_at_once(
        nats_url: str, tmp_path: Path) -> None:
    """`start()` returns (and `serve_forever` says ready) only once the server has read
    every stage's subscription: a caller on its own connection is never told "no
    responders" by a worker that said it was ready."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    wat_plugin(plugins, "stamp", "pre", {"message": {"payload": "stamped", "metadata": {}}})

    async def run(host: Host) -> None:
        # What the worker writes after its ready flush's PING reaches the server late.
        async with late_after_ping(nats_url) as late_url:
            worker = Worker(host, late_url, prefix="ready", name="r1")
            await worker.start()
            caller = await connect(nats_url, "ready-caller")
            try:
                msg = await caller.request("ready.ext.pre.stamp.v1", stamp_request("m"),
                                           timeout=5)
                assert json.loads(msg.data)["message"]["payload"] == "stamped"
            finally:
                await caller.close()
                await worker.drain()

    with Host(HostConfig(), runtime=Runtime(cache=False),
              plugin_dirs=[("workspace", plugins)]) as host:
        asyncio.run(run(host))


def test_reads_in_the_sockets_callback_keep_order_and_come_back_after_a_reconnect() -> None:
    """While its read loop waits, the fast client reads a message its `deliver_now`
    handler takes in the socket's callback (`FastClient._read_in_callback`): one at a
    time, the read loop's parser is not woken at all. A burst with messages for a
    callback subscription among them reaches both in order, the loop reading from the
    first message the handler does not take. After the server restarts, the new
    connection reads in its callback too."""
    async def one_at_a_time(nc: Any, plain: Client, got: list[bytes], parsed: list[int],
                            rounds: int) -> int:
        before = len(parsed)
        for i in range(rounds):
            await plain.publish("cb.now", b"one %d" % i, headers={"K": "v"})
            await plain.flush()
            deadline = time.monotonic() + 5
            while (not got or got[-1] != b"one %d" % i) and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            assert got[-1] == b"one %d" % i
        return len(parsed) - before

    async def run(url: str, server: Any, port: int) -> None:
        nc = await connect(url, "callback-reads")
        plain = Client()
        await plain.connect(url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)
        try:
            parsed: list[int] = []
            parse = nc._ps.parse

            async def counted(data: bytes = b"") -> None:
                parsed.append(len(data))
                await parse(data)
            nc._ps.parse = counted  # type: ignore[method-assign]
            now: list[bytes] = []
            later: list[bytes] = []
            sub = await nc.subscribe("cb.now")
            nc.deliver_now(sub, lambda msg: now.append(msg.data))  # type: ignore[attr-defined]

            async def callback(msg: Any) -> None:
                later.append(msg.data)
            await nc.subscribe("cb.plain", cb=callback)
            await nc.flush()

            assert await one_at_a_time(nc, plain, now, parsed, 50) == 0
            now.clear()
            for i in range(300):  # one burst: the plain client writes it in one go
                if i % 7 == 3:
                    await plain.publish("cb.plain", b"%d" % i)
                else:
                    await plain.publish("cb.now", b"%d" % i, headers={"K": "v"})
            await plain.flush()
            deadline = time.monotonic() + 5
            while len(now) + len(later) < 300 and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert now == [b"%d" % i for i in range(300) if i % 7 != 3]
            assert later == [b"%d" % i for i in range(300) if i % 7 == 3]
            assert parsed, "the messages for the callback went through the read loop"

            server.terminate()
            server.wait(10)
            with nats_server(port) as (_, again):
                deadline = time.monotonic() + 10
                # Connected again (a flush sent before the client saw the old connection
                # end is lost with it: nats-py's, not the callback's)
                while not (nc.stats["reconnects"] and plain.stats["reconnects"]
                           and nc.is_connected and plain.is_connected) \
                        and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                await nc.flush()
                now.clear()
                assert await one_at_a_time(nc, plain, now, parsed, 20) == 0
                again.terminate()
        finally:
            await plain.close()
            await nc.close()

    port = free_port()
    with nats_server(port) as (url, server):
        asyncio.run(run(url, server, port))
