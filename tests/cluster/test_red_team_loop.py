"""A hostile plugin against the worker's loop trial (red team).

A plugin granted `http` (no application code) earns the worker's event loop with short
calls, then makes a host call that waits there: an http.fetch to a server that never
answers. The wait ends at the plugin's own time-out (the fetch's deadline watchdog is
a thread of its own, not the loop it blocks), the plugin is sent back to the lane for
its back-off, unloading and loading it again under the same id does not win the loop
back meanwhile, and a healthy plugin on the same worker answers throughout. Many
hostile plugins do not get a shot each: once `max_demoted` demotions came close
together, no plugin is on trial for a while.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from cluster_support import plugin_folder, record_threads, stage_request

from loopback import Loopback
from wasmext import Host, HostConfig, Limits, load_config
from wasmext.cluster.worker import PROVE_CALLS, Worker
from wasmext.runtime import Runtime
from wasmext.testing import DATA_AT, HOST_CALL_IMPORT, RESPONSE_AT, guest_wat, packed

TIMEOUT_MS = 800
LONG = 600  # a request longer than this makes `waits` fetch from the silent server
STAGE = {"ok": True, "value": {"message": {"payload": "done", "metadata": {}}}}


def _waits_wat(url: str) -> str:
    """A pre stage answering at once for a short request; for a long one it first
    fetches `url` (which never answers) and answers whatever came back."""
    fetch = msgpack.packb({"op": "http.fetch", "url": url})
    resp = msgpack.packb(STAGE)
    body = (f"(if (i32.gt_u (local.get $l) (i32.const {LONG})) (then "
            f"(drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(fetch)})))))"
            f" (i64.const {packed(RESPONSE_AT, len(resp))})")
    return guest_wat(body, response=STAGE, imports=HOST_CALL_IMPORT, data=fetch,
                     registration={"hooks": [{"hook": "pre"}], "name": "waits", "abi_minor": 1})


def _request(message_id: str, long: bool = False) -> bytes:
    return stage_request(message_id, "x" * (LONG + 100) if long else "x")


@pytest.fixture
def serving(tmp_path: Path, server: Loopback) -> Any:
    server.server.slow_s = 30.0  # "/slow" answers after this, or when the server stops
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    digest = plugin_folder(plugins, "waits", _waits_wat(server.url("/slow")))
    plugin_folder(plugins, "stamp", guest_wat(response=STAGE,
                                        registration={"hooks": [{"hook": "pre"}]}))
    toml = tmp_path / "wasmext.toml"
    toml.write_text(f'[host]\ndata_dir = "{tmp_path / "data"}"\n'
                    f'[plugins]\nworkspace_dir = "{plugins}"\n'
                    f'[grants.waits]\ndigest = "sha256:{digest}"\n'
                    'capabilities = ["http", "http:127.0.0.1"]\n')
    limits = Limits(timeout_ms=TIMEOUT_MS, host_call_timeout_ms=TIMEOUT_MS,
                    fuel_per_call=10**13)
    config = replace(load_config(toml), limits=limits)
    with Host(config, runtime=Runtime(cache=False, defaults=config.limits)) as host:
        assert "http" in host.plugins["waits"].plugin.grants
        yield host



def test_a_host_call_that_waits_on_the_loop_holds_it_once_and_reload_wins_nothing_back(
        nats_url: str, serving: Host) -> None:
    ran_on = record_threads(serving)
    waits, stamp = "red.ext.pre.waits.v1", "red.ext.pre.stamp.v1"

    async def run() -> None:
        import nats

        worker = Worker(serving, nats_url, prefix="red", name="r1")
        await worker.start()
        loop_thread = threading.current_thread().name
        nc = await nats.connect(nats_url)
        try:
            for subject in (waits, stamp):
                for i in range(PROVE_CALLS + 1):
                    await nc.request(subject, _request(f"p{i}"), timeout=10)
            assert ran_on["waits"][-1] == loop_thread  # earned the loop

            # On the loop, it waits on a server that never answers: ended at its own
            # time-out by the fetch's watchdog (not the blocked loop), answered named.
            started = time.monotonic()
            slow = asyncio.ensure_future(nc.request(waits, _request("w1", long=True),
                                                    timeout=10))
            await asyncio.sleep(0.05)
            behind = await nc.request(stamp, _request("behind"), timeout=10)
            answer = await slow
            assert time.monotonic() - started < TIMEOUT_MS / 1000 + 3
            assert b"done" in behind.data
            assert ran_on["waits"][-1] == loop_thread
            # The fetch's `timeout` answer reached the guest, which answered anyway.
            assert b"done" in answer.data
            assert set(worker.demoted) == {"waits"}

            # Unloaded and loaded again under the same id: still off the loop.
            serving.unload("waits")
            serving.add(bytes(wasmtime.wat2wasm(_waits_wat("http://127.0.0.1:9/x"))),
                        plugin_id="waits", grants={"http", "http:127.0.0.1"},
                        limits={"timeout_ms": TIMEOUT_MS})
            for i in range(PROVE_CALLS * 2):
                msg = await nc.request(waits, _request(f"r{i}"), timeout=10)
                assert b"done" in msg.data
            assert loop_thread not in ran_on["waits"][-PROVE_CALLS * 2:]
            assert worker.counts[waits].demoted == 1
            msg = await nc.request(stamp, _request("after"), timeout=10)
            assert b"done" in msg.data and ran_on["stamp"][-1] == loop_thread
        finally:
            await nc.close()
            await worker.drain()

    asyncio.run(run())


def _spins_wat(name: str) -> str:
    """A pre stage answering at once for a short request, spinning for a long one."""
    resp = msgpack.packb(STAGE)
    body = (f"(if (i32.gt_u (local.get $l) (i32.const {LONG})) (then (loop $spin "
            f"(br $spin)))) (i64.const {packed(RESPONSE_AT, len(resp))})")
    return guest_wat(body, response=STAGE, registration={"hooks": [{"hook": "pre"}],
                                                         "name": name})


@pytest.fixture
def spinners(tmp_path: Path) -> Any:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    for pid in ("spin-a", "spin-b"):
        plugin_folder(plugins, pid, _spins_wat(pid))
    plugin_folder(plugins, "stamp", guest_wat(response=STAGE,
                                        registration={"hooks": [{"hook": "pre"}]}))
    config = HostConfig(limits=Limits(timeout_ms=TIMEOUT_MS, fuel_per_call=10**13))
    with Host(config, runtime=Runtime(cache=False, defaults=config.limits),
              plugin_dirs=[("workspace", plugins)]) as host:
        yield host


def test_after_max_demoted_demotions_no_plugin_is_on_trial_for_a_while(
        nats_url: str, spinners: Host) -> None:
    ran_on = record_threads(spinners)
    ran_on.update({"spin-a": [], "spin-b": []})
    a, b, stamp = ("cap.ext.pre.spin-a.v1", "cap.ext.pre.spin-b.v1",
                   "cap.ext.pre.stamp.v1")

    async def run() -> None:
        import nats

        worker = Worker(spinners, nats_url, prefix="cap", name="c1")
        worker.max_demoted = 1
        await worker.start()
        loop_thread = threading.current_thread().name
        nc = await nats.connect(nats_url)
        try:
            for subject in (a, b, stamp):  # all three earn the loop
                for i in range(PROVE_CALLS + 1):
                    await nc.request(subject, _request(f"p{i}"), timeout=10)
            assert ran_on["spin-a"][-1] == ran_on["spin-b"][-1] == loop_thread

            answer = await nc.request(a, _request("a-slow", long=True), timeout=10)
            assert answer.headers is not None and \
                "timeout" in answer.headers["Nats-Service-Error"]
            assert set(worker.demoted) == {"spin-a"}

            # The cap is reached: the trial pauses, spin-b, proven short, no longer runs
            # on the loop, and its slow call holds no one up.
            started = time.monotonic()
            slow = asyncio.ensure_future(nc.request(b, _request("b-slow", long=True),
                                                    timeout=10))
            await asyncio.sleep(0.1)
            for i in range(5):
                msg = await nc.request(stamp, _request(f"h{i}"), timeout=10)
                assert b"done" in msg.data
            assert time.monotonic() - started < TIMEOUT_MS / 1000
            assert not slow.done()
            answer = await slow
            assert answer.headers is not None and \
                "timeout" in answer.headers["Nats-Service-Error"]
            assert ran_on["spin-b"][-1] != loop_thread
            assert set(worker.demoted) == {"spin-a"}  # not demoted: it was on the lane
            assert worker.counts[b].demoted == 0
        finally:
            await nc.close()
            await worker.drain()

    asyncio.run(run())
