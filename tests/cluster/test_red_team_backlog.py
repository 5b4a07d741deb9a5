"""A peer flooding a worker's subjects (`Worker._admit`: stage calls on the lane, with
direct delivery, and whole plugin calls).

HOLE (fixed): requests handed straight from the reader (`FastClient.deliver_now`), or
by a callback that returns at once (a plugin's `call` endpoint starts a task), went
into the worker's queues without bound: nats-py's slow-consumer limits never applied,
since nothing stayed in the subscription's queue. A request without a deadline never
expired there, so a flood held its bytes until each was run. The backlog is now
bounded in calls and bytes; a request past either is dropped unrun (as a slow
consumer's message is) and counted.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_support import stage_request, wat_plugin

from wasmext import Host, HostConfig
from wasmext.cluster.contract import MSGPACK, PluginCall
from wasmext.cluster.contract import encode as contract_encode
from wasmext.cluster.worker import Worker
from wasmext.runtime import Runtime

ANSWER = {"message": {"payload": "done", "metadata": {}}}




def _stage_flood() -> tuple[str, bytes]:
    return "flood.ext.pre.slow.v1", stage_request("flood", "x" * 2000, extension="slow")


def _plugin_flood() -> tuple[str, bytes]:
    return "flood.plugin.slow.v1.call", contract_encode(PluginCall("pre", "x" * 2000),
                                                        MSGPACK)


@pytest.mark.parametrize("flood", [_stage_flood, _plugin_flood])
def test_a_request_flood_is_held_to_the_workers_backlog(
        nats_url: str, tmp_path: Path, flood: Any) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    wat_plugin(plugins, "slow", "pre", ANSWER, spin=2_000_000)
    subject, body = flood()

    async def run(host: Host) -> None:
        worker = Worker(host, nats_url, prefix="flood", name="f1", concurrency=2,
                        inline_below_ms=0)  # every stage call goes through the lane
        worker.max_backlog, worker.max_backlog_bytes = 16, 64 * 1024
        await worker.start()
        deepest = [0]
        admit = worker._admit

        def watched(*args: Any) -> bool:
            deepest[0] = max(deepest[0], worker._lane.pending + worker._plugin_calls)
            return admit(*args)
        worker._admit = watched  # type: ignore[method-assign]
        import nats

        nc = await nats.connect(nats_url)
        try:
            started = time.monotonic()
            for _ in range(1_000):  # no deadline header: nothing would ever expire them
                await nc.publish(subject, body, reply="_INBOX.nobody.listens")
            await nc.flush()
            await asyncio.sleep(0.2)
            while (worker._lane.pending or worker._plugin_calls) and \
                    time.monotonic() - started < 30:
                await asyncio.sleep(0.05)
            assert time.monotonic() - started < 30
            assert deepest[0] <= 16
            assert worker.shed > 500 and worker.served + worker.shed == 1_000
            assert worker._backlog_bytes == 0  # every byte taken in is given back
            healthy = stage_request("healthy", "", extension="slow")
            msg = await nc.request("flood.ext.pre.slow.v1", healthy, timeout=10)
            assert json.loads(msg.data)["message"]["payload"] == "done"
        finally:
            await nc.close()
            await worker.drain()

    with Host(HostConfig(), runtime=Runtime(cache=False),
              plugin_dirs=[("workspace", plugins)]) as host:
        asyncio.run(run(host))
