"""The fast paths keep the delivery rules: a worker running short calls on its loop
answers in arrival order, still drops an expired request unrun, and signs nothing
differently; `Router.arun` over a link opened on the caller's loop gives what
`Router.run` gives, fails the same way, and a blocking request on that loop refuses
instead of hanging."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_support import stamp_host, wat_plugin
from nats.errors import TimeoutError as NatsTimeout

from wasmext import Host, HostConfig, PipelineError, parse_policy
from wasmext.cluster.contract import DEADLINE_HEADER, ExtMessage, ExtRef, ExtRequest
from wasmext.cluster.contract import encode as contract_encode
from wasmext.cluster.link import NatsLink
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.cluster.worker import Worker
from wasmext.runtime import Runtime

SUBJECT = "fast.ext.pre.stamp.v1"
POLICY = parse_policy({"pre": [{"id": "stamp", "mode": "required"}]})


class InThread:
    """A Worker on its own event loop thread."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="worker-loop")
        self.thread.start()
        asyncio.run_coroutine_threadsafe(worker.start(), self.loop).result(15)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.worker.drain(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def request(message_id: str) -> bytes:
    return contract_encode(ExtRequest(
        trace_id=f"t-{message_id}", tenant_id="default", extensions=ExtRef(id="stamp"),
        message=ExtMessage(message_id=message_id, message_type="chat", payload="x")))


@pytest.fixture
def serving(tmp_path: Path) -> Any:
    with stamp_host(tmp_path) as host:
        yield host


def test_an_inline_worker_answers_in_arrival_order_on_its_loop_and_drops_expired(
        nats_url: str, serving: Host) -> None:
    ran_on: list[str] = []
    try_call = serving.try_call

    def recording(*args: Any, **kwargs: Any) -> Any:
        ran_on.append(threading.current_thread().name)
        return try_call(*args, **kwargs)
    serving.try_call = recording  # type: ignore[method-assign]
    worker = InThread(Worker(serving, nats_url, prefix="fast", name="f1",
                             inline_below_ms=60_000))
    try:
        async def burst() -> tuple[list[str], list[str]]:
            import nats

            nc = await nats.connect(nats_url)
            arrived: list[str] = []
            ids = [f"m{i}" for i in range(40)]

            async def one(message_id: str) -> None:
                msg = await nc.request(SUBJECT, request(message_id), timeout=10)
                arrived.append(msg.data.decode())
            await asyncio.gather(*(one(i) for i in ids))
            # Already past its deadline: dropped unrun, unanswered.
            late = {DEADLINE_HEADER: str(int((time.time() - 1) * 1000))}
            with pytest.raises(NatsTimeout):
                await nc.request(SUBJECT, request("late"), timeout=1, headers=late)
            await nc.close()
            return ids, [next(i for i in ids if f'"{i}"' in data) for data in arrived]

        sent, answered = asyncio.run(burst())
        assert answered == sent  # one call at a time on the loop: replies in order
        assert set(ran_on) == {"worker-loop"} and len(ran_on) == 40  # no thread hop
        counts = worker.worker.counts[SUBJECT]
        assert (counts.answered, counts.expired) == (40, 1)
    finally:
        worker.stop()


def test_arun_over_a_link_on_the_callers_loop_matches_run(nats_url: str,
                                                          serving: Host) -> None:
    worker = InThread(Worker(serving, nats_url, prefix="fast", name="f2"))
    registry = parse_registry({"stamp": {"type": "pre", "subject": SUBJECT,
                                         "timeout_ms": 5000}})
    try:
        with NatsLink(nats_url, name="sync-caller") as link, serving.session() as s:
            expected = Router(POLICY, RemoteCaller(registry, link)).run(s, "hi", trace_id="t-same")

        async def main() -> Any:
            link = await NatsLink.open(nats_url, name="async-caller")
            try:
                router = Router(POLICY, RemoteCaller(registry, link))
                with serving.session() as s:
                    got = await router.arun(s, "hi", trace_id="t-same")
                    # A blocking request on the link's own loop would wait for ever.
                    with pytest.raises(RuntimeError, match="arequest"):
                        link.request(SUBJECT, request("x"), {}, 1)
                return got, router.caller.stats["stamp"] if router.caller else None
            finally:
                await link.aclose()

        got, stats = asyncio.run(main())
        assert got.message == expected.message and got.message["payload"] == "stamped"
        assert stats is not None and (stats.calls, stats.ok) == (1, 1)
    finally:
        worker.stop()


def test_arun_fails_a_required_stage_nobody_serves_as_run_does(nats_url: str,
                                                               serving: Host) -> None:
    registry = parse_registry({"stamp": {"type": "pre", "subject": "nobody.ext.pre.x.v1",
                                         "timeout_ms": 500, "retry": 1}})

    async def main() -> str:
        link = await NatsLink.open(nats_url, name="async-caller")
        try:
            router = Router(POLICY, RemoteCaller(registry, link))
            with serving.session() as s, pytest.raises(PipelineError) as info:
                await router.arun(s, "hi")
            assert router.caller is not None
            assert router.caller.stats["stamp"].retries == 1
            return str(info.value)
        finally:
            await link.aclose()

    message = asyncio.run(main())
    assert "required pre stage stamp failed" in message
    assert "no responders" in message or "timeout" in message


def _slowed(host: Host, seconds: float) -> list[str]:
    """Make `slow`'s calls take `seconds`; returns the threads stamp's calls ran on."""
    ran_on: list[str] = []
    try_call = host.try_call

    def timed(plugin_id: str, *args: Any, **kwargs: Any) -> Any:
        if plugin_id == "slow":
            time.sleep(seconds)
        else:
            ran_on.append(threading.current_thread().name)
        return try_call(plugin_id, *args, **kwargs)
    host.try_call = timed  # type: ignore[method-assign]
    return ran_on


@pytest.fixture
def with_slow(tmp_path: Path) -> Any:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    wat_plugin(plugins, "stamp", "pre", {"message": {"payload": "stamped", "metadata": {}}})
    wat_plugin(plugins, "slow", "pre", {"message": {"payload": "slow", "metadata": {}}})
    with Host(HostConfig(), runtime=Runtime(cache=False),
              plugin_dirs=[("workspace", plugins)]) as host:
        yield host


def test_pooled_short_calls_do_not_wait_behind_a_slow_one(nats_url: str,
                                                          with_slow: Host) -> None:
    ran_on = _slowed(with_slow, 1.5)
    worker = InThread(Worker(with_slow, nats_url, prefix="fast", name="f2",
                             inline_below_ms=0, concurrency=4))
    try:
        async def run() -> tuple[float, float, list[bytes]]:
            import nats

            nc = await nats.connect(nats_url)
            started = time.monotonic()
            slow = asyncio.ensure_future(nc.request("fast.ext.pre.slow.v1", request("s"),
                                                    timeout=10))
            await asyncio.sleep(0.1)  # the slow call has taken the lane's thread
            short = await asyncio.gather(*(nc.request(SUBJECT, request(f"m{i}"), timeout=10)
                                           for i in range(20)))
            shorts_done = time.monotonic() - started
            await slow
            slow_done = time.monotonic() - started
            await nc.close()
            return shorts_done, slow_done, [m.data for m in short]

        shorts_done, slow_done, bodies = asyncio.run(run())
        assert all(b'"stamped"' in body for body in bodies)
        assert slow_done >= 1.5
        assert shorts_done < 1.2  # another pool thread took them: not queued behind
        assert len(ran_on) == 20 and "worker-loop" not in ran_on  # on the pool, not the loop
        assert worker.worker.counts[SUBJECT].answered == 20
    finally:
        worker.stop()


def test_a_pooled_call_that_expired_behind_a_busy_pool_is_dropped_unrun(
        nats_url: str, with_slow: Host) -> None:
    ran_on = _slowed(with_slow, 1.0)
    worker = InThread(Worker(with_slow, nats_url, prefix="fast", name="f3",
                             inline_below_ms=0, concurrency=1))
    try:
        async def run() -> None:
            import nats

            nc = await nats.connect(nats_url)
            slow = asyncio.ensure_future(nc.request("fast.ext.pre.slow.v1", request("s"),
                                                    timeout=10))
            await asyncio.sleep(0.1)  # the only pool thread runs the slow call
            soon = {DEADLINE_HEADER: str(int((time.time() + 0.3) * 1000))}
            with pytest.raises(NatsTimeout):  # waited past its deadline: never answered
                await nc.request(SUBJECT, request("late"), timeout=2, headers=soon)
            await slow
            ok = await nc.request(SUBJECT, request("after"), timeout=10)
            assert b'"stamped"' in ok.data
            await nc.close()

        asyncio.run(run())
        counts = worker.worker.counts[SUBJECT]
        assert (counts.answered, counts.expired) == (1, 1)
        assert len(ran_on) == 1  # the expired one never reached the plugin
    finally:
        worker.stop()


def test_the_lane_answers_a_burst_each_with_its_own_answer_and_drain_waits_for_it(
        nats_url: str, with_slow: Host) -> None:
    ran_on = _slowed(with_slow, 0.5)
    worker = InThread(Worker(with_slow, nats_url, prefix="fast", name="f4",
                             inline_below_ms=0, concurrency=2))
    try:
        async def run() -> tuple[list[bytes], bytes, float]:
            import nats

            nc = await nats.connect(nats_url)
            burst = await asyncio.gather(*(nc.request(SUBJECT, request(f"burst-{i}"),
                                                      timeout=10) for i in range(64)))
            slow = asyncio.ensure_future(nc.request("fast.ext.pre.slow.v1",
                                                    request("last"), timeout=10))
            await asyncio.sleep(0.1)  # the slow call runs on the lane's thread
            started = time.monotonic()
            drained = asyncio.wrap_future(asyncio.run_coroutine_threadsafe(
                worker.worker.drain(), worker.loop))
            answer = await slow
            await drained
            waited = time.monotonic() - started
            await nc.close()
            return [m.data for m in burst], answer.data, waited

        bodies, last, waited = asyncio.run(run())
        for i, body in enumerate(bodies):  # answers batched back, none crossed
            assert f'"burst-{i}"'.encode() in body and b'"stamped"' in body
        assert b'"last"' in last and b'"slow"' in last  # answered before the drain ended
        assert 0.2 < waited < 5
        assert "worker-loop" not in ran_on and len(ran_on) == 64
        assert worker.worker.counts[SUBJECT].answered == 64
    finally:
        worker.loop.call_soon_threadsafe(worker.loop.stop)
        worker.thread.join(5)
