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
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chunking_proxy import ChunkingProxy, Plan, proxy_for
from cluster_support import stage_request, wat_plugin
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wasmext import Host, HostConfig, parse_policy
from wasmext.cluster.link import NatsLink
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.cluster.worker import Worker
from wasmext.runtime import Runtime

PREFIX = "chunked"
SUBJECT = f"{PREFIX}.ext.pre.stamp.v1"
POLICY = parse_policy({"pre": [{"id": "stamp", "mode": "required"}]})
REGISTRY = parse_registry({"stamp": {"type": "pre", "subject": SUBJECT, "timeout_ms": 10000}})
MODES = ["whole", "bytes", "random", "boundaries", "line", "header", "payload", "crlf"]


class InThread:
    """A Worker on its own event loop thread."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.loop = asyncio.new_event_loop()
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
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    wat_plugin(plugins, "stamp", "pre", {"message": {"payload": "stamped", "metadata": {}}})
    with Host(HostConfig(), runtime=Runtime(cache=False),
              plugin_dirs=[("workspace", plugins)]) as host:
        yield host


@pytest.fixture
def proxied(nats_url: str, serving: Host) -> Iterator[tuple[ChunkingProxy, InThread]]:
    """A proxy in front of the session's server and a worker connected through it."""
    proxy = proxy_for(nats_url)
    worker = InThread(Worker(serving, proxy.url, prefix=PREFIX, name="chunked"))
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
        proxied: tuple[ChunkingProxy, InThread], serving: Host) -> None:
    proxy, _ = proxied

    async def main() -> None:
        link = await NatsLink.open(proxy.url, name="chunked-caller")
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
        finally:
            await link.aclose()

    asyncio.run(main())
