"""A hostile (or broken) worker answering every call with `Nats-Service-Error-Code: 503`,
on a real nats-server: a plain nats-py responder, no wasmext worker. A 503 is "try
another worker", so the caller tries again, but only `retry` times and within its
deadline: it never loops, reports the failure named, and the next call is as bounded."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wasmext import Host, PipelineError, parse_policy
from wasmext.cluster.contract import PluginAdvert, encode
from wasmext.cluster.link import NatsLink
from wasmext.cluster.plugins import attach_remote
from wasmext.cluster.registry import RemotePluginEntry, parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.config import HostConfig
from wasmext.errors import RemoteUnavailable, Timeout

STAGE = "hostile503.ext.pre.stamp.v1"
PLUGIN = "hostile503.plugin.steady.v1"


class Refuser:
    """A nats-py responder on its own loop thread: every request on a call subject is
    answered 503 (after `delay_s`), a plugin's `.describe` with a valid advert."""

    def __init__(self, url: str, delay_s: float = 0.0) -> None:
        self.url, self.delay_s = url, delay_s
        self.seen: list[float] = []  # when each call request arrived (time.monotonic)
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self._start())
            started.set()
            self.loop.run_forever()
        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert started.wait(30)

    async def _start(self) -> None:
        import nats

        self.client = await nats.connect(self.url, name="refuser")
        advert = encode(PluginAdvert("steady", "1.0.0", {"hooks": [{"hook": "on_plain_text"}]}),
                        "application/msgpack")

        async def refuse(msg: Any) -> None:
            self.seen.append(time.monotonic())
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            await self.client.publish(msg.reply, b"", headers={
                "Nats-Service-Error-Code": "503", "Nats-Service-Error": "busy, try another",
                "Wasmext-Worker": "refuser"})

        async def describe(msg: Any) -> None:
            await self.client.publish(msg.reply, advert)
        await self.client.subscribe(STAGE, cb=refuse)
        await self.client.subscribe(f"{PLUGIN}.call", cb=refuse)
        await self.client.subscribe(f"{PLUGIN}.describe", cb=describe)
        await self.client.flush()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.client.close(), self.loop).result(10)
        # nats-py's close cancels its subscriptions' tasks without waiting for them: left
        # pending, each raised "Event loop is closed" when collected after the loop went.
        asyncio.run_coroutine_threadsafe(_finish_the_rest(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def _finish_the_rest() -> None:
    """Cancel every other task of the running loop and wait until each has ended."""
    rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


@pytest.fixture
def refuser(nats_url: str, request: pytest.FixtureRequest) -> Iterator[Refuser]:
    r = Refuser(nats_url, getattr(request, "param", 0.0))
    yield r
    r.close()


def _router(link: NatsLink, retry: int, timeout_ms: int, breaker_failures: int = 1000
            ) -> Router:
    return Router(parse_policy({"pre": [{"id": "stamp", "mode": "required"}]}),
                  RemoteCaller(parse_registry({"stamp": {
                      "type": "pre", "subject": STAGE, "timeout_ms": timeout_ms,
                      "retry": retry, "breaker": {"failures": breaker_failures}}}), link))


def _run(router: Router, session: Any, waits: str) -> Any:
    """The pipeline run, blocking (`run`) or awaited (`arun`)."""
    if waits == "run":
        return router.run(session, "hello")
    return asyncio.run(router.arun(session, "hello"))


def _quiet(refuser: Refuser, count: int) -> None:
    """No attempt arrives after the call ended (it does not loop in the background)."""
    time.sleep(0.3)
    assert len(refuser.seen) == count


@pytest.mark.parametrize("waits", ["run", "arun"])
@pytest.mark.parametrize("retry", [0, 3, 10])
def test_a_stage_answered_503_forever_is_tried_retry_times_and_fails_named(
        refuser: Refuser, nats_url: str, retry: int, waits: str) -> None:
    with NatsLink(nats_url, name="refused-stage") as link, \
            Host(HostConfig(), plugin_dirs=[]) as app:
        router = _router(link, retry, 2000)
        for n in range(1, 3):
            started = time.monotonic()
            with app.session() as session, pytest.raises(PipelineError) as caught:
                _run(router, session, waits)
            assert time.monotonic() - started < 3
            assert "error 503: busy, try another" in caught.value.message
            _quiet(refuser, n * (retry + 1))
        assert router.caller is not None
        stats = router.caller.stats["stamp"]
        assert (stats.calls, stats.failed, stats.ok, stats.retries) == (2, 2, 0, 2 * retry)


@pytest.mark.parametrize("refuser", [0.15], indirect=True)
def test_slow_503s_stop_at_the_call_trees_deadline(refuser: Refuser, nats_url: str) -> None:
    # Each 503 takes 150 ms and ten more attempts are allowed: the run's 400 ms budget
    # ends the attempts, not the count.
    with NatsLink(nats_url, name="refused-slow") as link, \
            Host(HostConfig(), plugin_dirs=[]) as app:
        router = _router(link, 10, 2000)
        started = time.monotonic()
        with app.session() as session, pytest.raises(PipelineError) as caught:
            router.run(session, "hello", budget_ms=400)
        took = time.monotonic() - started
        assert took < 1.0, took
        assert "503" in caught.value.message or "time is up" in caught.value.message
        assert 1 <= len(refuser.seen) <= 4
        _quiet(refuser, len(refuser.seen))


def test_the_breaker_opens_on_503s_and_spares_the_worker(refuser: Refuser,
                                                         nats_url: str) -> None:
    with NatsLink(nats_url, name="refused-breaker") as link, \
            Host(HostConfig(), plugin_dirs=[]) as app:
        router = _router(link, 2, 2000, breaker_failures=3)
        for _ in range(20):
            with app.session() as session, pytest.raises(PipelineError):
                router.run(session, "hello")
        assert len(refuser.seen) == 3  # then the circuit is open: no request at all
        assert router.caller is not None
        assert router.caller.stats["stamp"].short_circuited == 19


def test_a_remote_plugin_answered_503_forever_is_remote_unavailable(
        refuser: Refuser, nats_url: str, tmp_path: Path) -> None:
    # A plugin call retries only attempts nobody answered: a worker's error answer,
    # whatever its code, is the call's failure at once (a real worker's full pool is
    # InstancePoolFull in its answer's body, never a 503 here).
    host = Host(HostConfig(data_dir=tmp_path / "caller"), plugin_dirs=[])
    try:
        with NatsLink(nats_url, name="refused-plugin") as link:
            attach_remote(host, link, {"steady": RemotePluginEntry(
                id="steady", subject=PLUGIN, timeout_ms=2000, attempt_ms=1000, retry=4)})
            proxy = host.plugins["steady"].plugin
            for n in range(1, 3):
                started = time.monotonic()
                with pytest.raises(RemoteUnavailable) as caught:
                    proxy.call("on_plain_text", "hello")
                assert time.monotonic() - started < 3
                assert "503" in str(caught.value) and "busy, try another" in str(caught.value)
                assert not isinstance(caught.value, Timeout)
                _quiet(refuser, n)
    finally:
        host.close()
