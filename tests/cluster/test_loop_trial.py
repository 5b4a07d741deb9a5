"""A worker runs a plugin's stage calls on its loop only while they have proven short:
its first calls go through the lane, a run of short ones moves it to the loop, and the
first call there that is not short sends the plugin back to the lane for a back-off
that doubles at each demotion. A hostile plugin holds the loop once per back-off, for
at most its own time-out, and meanwhile a healthy plugin on the same worker answers
while the hostile one runs; the endpoint statistics, the metrics and the log say what
happened."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_support import plugin_folder, record_threads, stage_request
from prometheus_client import generate_latest

from wasmext import Host, HostConfig, Limits
from wasmext.cluster.worker import PROVE_CALLS, SHORT_CALL_MS, Worker
from wasmext.runtime import Runtime
from wasmext.testing import RESPONSE_AT, guest_wat, packed

TIMEOUT_MS = 800
# A request longer than this makes `turns` spin until its time-out.
LONG = 600


def _turns_wat() -> str:
    """A pre stage answering at once for a short request, spinning for a long one."""
    import msgpack

    resp = msgpack.packb({"ok": True, "value": {"message": {"payload": "turned",
                                                            "metadata": {}}}})
    body = (f"(if (i32.gt_u (local.get $l) (i32.const {LONG})) (then (loop $spin "
            f"(br $spin)))) (i64.const {packed(RESPONSE_AT, len(resp))})")
    return guest_wat(body, response={"ok": True, "value": {"message": {
        "payload": "turned", "metadata": {}}}},
        registration={"hooks": [{"hook": "pre"}], "name": "turns"})


def _request(message_id: str, long: bool = False) -> bytes:
    return stage_request(message_id, "x" * (LONG + 100) if long else "x")


@pytest.fixture
def serving(tmp_path: Path) -> Any:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    plugin_folder(plugins, "turns", _turns_wat())
    plugin_folder(plugins, "stamp", guest_wat(response={"ok": True, "value": {"message": {
        "payload": "stamped", "metadata": {}}}},
        registration={"hooks": [{"hook": "pre"}], "name": "stamp"}))
    # Time-outs of 800 ms: far above the 50 ms that would put them on the loop by rule.
    config = HostConfig(limits=Limits(timeout_ms=TIMEOUT_MS, fuel_per_call=10**13))
    with Host(config, runtime=Runtime(cache=False, defaults=config.limits),
              plugin_dirs=[("workspace", plugins)]) as host:
        yield host



def test_a_plugin_slow_after_proving_short_holds_the_loop_once_then_runs_off_it(
        nats_url: str, serving: Host, caplog: pytest.LogCaptureFixture) -> None:
    ran_on = record_threads(serving)
    turns, stamp = "trial.ext.pre.turns.v1", "trial.ext.pre.stamp.v1"

    async def run() -> None:
        import nats

        worker = Worker(serving, nats_url, prefix="trial", name="t1")
        await worker.start()
        worker_loop = threading.current_thread().name
        nc = await nats.connect(nats_url)
        try:
            for subject in (turns, stamp):  # proven short on the lane, then on the loop
                for i in range(PROVE_CALLS + 3):
                    msg = await nc.request(subject, _request(f"p{i}"), timeout=10)
                    assert msg.headers is None or "Nats-Service-Error" not in msg.headers
            for pid in ("turns", "stamp"):
                assert worker_loop not in ran_on[pid][:PROVE_CALLS]
                assert ran_on[pid][PROVE_CALLS:] == [worker_loop] * 3
            assert worker.counts[turns].on_loop == 3 and not worker.demoted

            # Fast so far, now slow: this one call holds the loop, for its own time-out.
            started = time.monotonic()
            slow = asyncio.ensure_future(nc.request(turns, _request("s1", long=True),
                                                    timeout=10))
            await asyncio.sleep(0.05)
            waiting = await nc.request(stamp, _request("behind"), timeout=10)
            answer = await slow
            took = time.monotonic() - started
            assert answer.headers is not None
            assert answer.headers["Nats-Service-Error-Code"] == "500"
            assert "timeout" in answer.headers["Nats-Service-Error"]
            assert b"stamped" in waiting.data
            assert took < TIMEOUT_MS / 1000 + 3  # its own time-out, not more
            assert ran_on["turns"][-1] == worker_loop
            assert worker.demoted["turns"] >= SHORT_CALL_MS and "stamp" not in worker.demoted
            assert worker.counts[turns].demoted == 1

            # Demoted: its next slow call runs off the loop, and the healthy plugin,
            # still on the loop, answers meanwhile.
            started = time.monotonic()
            slow = asyncio.ensure_future(nc.request(turns, _request("s2", long=True),
                                                    timeout=10))
            await asyncio.sleep(0.1)
            for i in range(10):
                msg = await nc.request(stamp, _request(f"h{i}"), timeout=10)
                assert b"stamped" in msg.data
            healthy_done = time.monotonic() - started
            assert not slow.done()
            assert healthy_done < TIMEOUT_MS / 1000  # not behind the slow call
            answer = await slow
            assert answer.headers is not None
            assert "timeout" in answer.headers["Nats-Service-Error"]
            assert ran_on["turns"][-1] != worker_loop
            assert ran_on["stamp"][-10:] == [worker_loop] * 10
            assert worker.counts[turns].demoted == 1  # once: its back-off has a minute to go
            # A short call of the demoted plugin is still answered, off the loop.
            msg = await nc.request(turns, _request("after"), timeout=10)
            assert b"turned" in msg.data and ran_on["turns"][-1] != worker_loop

            stats = json.loads((await nc.request("$SRV.STATS.trial-turns", b"",
                                                 timeout=5)).data)
            data = {e["subject"]: e["data"] for e in stats["endpoints"]}[turns]
            assert (data["on_loop"], data["demoted"]) == (4, 1)
        finally:
            await nc.close()
            await worker.drain()

    with caplog.at_level(logging.WARNING, logger="wasmext.cluster.worker"):
        asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records if "held the event loop" in r.message]
    assert len(lines) == 1 and "turns" in lines[0]
    metrics = generate_latest(serving.observe.metrics.registry).decode()
    assert ('extension_worker_demoted_total{extension="turns",subject="trial.ext.pre.turns.v1",'
            'worker="t1"} 1.0') in metrics
    assert ('extension_worker_loop_calls_total{extension="stamp",'
            'subject="trial.ext.pre.stamp.v1",worker="t1"} 14.0') in metrics


def test_short_call_ms_zero_keeps_every_call_on_the_lane(nats_url: str,
                                                          serving: Host) -> None:
    ran_on = record_threads(serving)

    async def run() -> None:
        import nats

        worker = Worker(serving, nats_url, prefix="lane", name="l1", short_call_ms=0)
        await worker.start()
        nc = await nats.connect(nats_url)
        try:
            for i in range(PROVE_CALLS * 2):
                msg = await nc.request("lane.ext.pre.stamp.v1", _request(f"m{i}"), timeout=10)
                assert b"stamped" in msg.data
            assert worker.counts["lane.ext.pre.stamp.v1"].on_loop == 0
        finally:
            await nc.close()
            await worker.drain()
        assert threading.current_thread().name not in ran_on["stamp"]

    asyncio.run(run())


def test_a_slow_call_on_the_lane_starts_the_proof_again(nats_url: str,
                                                        serving: Host) -> None:
    ran_on = record_threads(serving)

    async def run() -> None:
        import nats

        worker = Worker(serving, nats_url, prefix="again", name="a1")
        await worker.start()
        loop_thread = threading.current_thread().name
        subject = "again.ext.pre.turns.v1"
        nc = await nats.connect(nats_url)
        try:
            for i in range(PROVE_CALLS - 1):
                await nc.request(subject, _request(f"m{i}"), timeout=10)
            slow = await nc.request(subject, _request("slow", long=True), timeout=10)
            assert slow.headers is not None and "timeout" in slow.headers["Nats-Service-Error"]
            for i in range(PROVE_CALLS):  # a whole run of short ones again
                await nc.request(subject, _request(f"n{i}"), timeout=10)
            assert loop_thread not in ran_on["turns"]  # no call reached the loop yet
            assert not worker.demoted  # slow on the lane blocked nobody
            await nc.request(subject, _request("now"), timeout=10)
            assert ran_on["turns"][-1] == loop_thread
        finally:
            await nc.close()
            await worker.drain()

    asyncio.run(run())


def test_a_new_version_proves_itself_again_and_a_demoted_plugin_stays_demoted(
        nats_url: str, serving: Host, tmp_path: Path) -> None:
    ran_on = record_threads(serving)

    async def run() -> None:
        import nats

        worker = Worker(serving, nats_url, prefix="again2", name="v1")
        await worker.start()
        loop_thread = threading.current_thread().name
        stamp, turns = "again2.ext.pre.stamp.v1", "again2.ext.pre.turns.v1"
        nc = await nats.connect(nats_url)
        try:
            for i in range(PROVE_CALLS + 1):
                await nc.request(stamp, _request(f"m{i}"), timeout=10)
                await nc.request(turns, _request(f"m{i}"), timeout=10)
            assert ran_on["stamp"][-1] == ran_on["turns"][-1] == loop_thread
            await nc.request(turns, _request("slow", long=True), timeout=10)
            assert "turns" in worker.demoted
            for pid in ("stamp", "turns"):  # both updated: a new version of each
                toml = tmp_path / "plugins" / pid / "plugin.toml"
                toml.write_text(toml.read_text().replace('"1.0.0"', '"1.1.0"'))
            serving.rescan()
            came, _gone = await worker.resync()
            assert sorted(came) == ["stamp", "turns"]
            await nc.request(stamp, _request("fresh"), timeout=10)
            assert ran_on["stamp"][-1] != loop_thread  # back on probation
            for i in range(PROVE_CALLS + 1):
                await nc.request(turns, _request(f"n{i}"), timeout=10)
            assert loop_thread not in ran_on["turns"][-PROVE_CALLS - 1:]  # still demoted
        finally:
            await nc.close()
            await worker.drain()

    asyncio.run(run())


def test_after_its_back_off_a_demoted_plugin_proves_itself_again_and_the_next_is_longer(
        nats_url: str, serving: Host, caplog: pytest.LogCaptureFixture) -> None:
    ran_on = record_threads(serving)

    async def run() -> None:
        import nats

        worker = Worker(serving, nats_url, prefix="backoff", name="b1")
        worker.demote_s = 0.5
        await worker.start()
        loop_thread = threading.current_thread().name
        subject = "backoff.ext.pre.turns.v1"
        nc = await nats.connect(nats_url)

        async def prove() -> None:
            for i in range(PROVE_CALLS):
                await nc.request(subject, _request(f"m{i}"), timeout=10)
            await nc.request(subject, _request("next"), timeout=10)

        try:
            await prove()
            assert ran_on["turns"][-1] == loop_thread
            await nc.request(subject, _request("slow-1", long=True), timeout=10)
            demoted_at = time.monotonic()
            await prove()  # within the back-off: short calls prove nothing
            assert loop_thread not in ran_on["turns"][-PROVE_CALLS - 1:]
            await asyncio.sleep(max(0.0, demoted_at + 0.6 - time.monotonic()))
            await prove()  # the back-off is over: proven again, back on the loop
            assert ran_on["turns"][-1] == loop_thread
            await nc.request(subject, _request("slow-2", long=True), timeout=10)
            assert worker.counts[subject].demoted == 2
        finally:
            await nc.close()
            await worker.drain()

    with caplog.at_level(logging.WARNING, logger="wasmext.cluster.worker"):
        asyncio.run(run())
    lines = [r.getMessage() for r in caplog.records if "held the event loop" in r.message]
    assert len(lines) == 2
    assert lines[0].endswith("for 0.5 s") and lines[1].endswith("for 1 s")  # doubled


def test_the_trial_record_proves_demotes_backs_off_and_pauses_without_a_worker() -> None:
    from wasmext.cluster.looptrial import LoopTrial

    trial = LoopTrial("unit", short_call_ms=SHORT_CALL_MS)
    short, slow = SHORT_CALL_MS / 4000, SHORT_CALL_MS / 500
    for _ in range(PROVE_CALLS - 1):
        trial.proved("a", short)
    assert not trial.on_trial("a")
    trial.proved("a", short)
    assert trial.on_trial("a") and trial.demoted == {}
    for _ in range(PROVE_CALLS - 1):
        trial.proved("b", short)
    trial.proved("b", slow)  # slow on the lane: the count starts again, no demotion
    for _ in range(PROVE_CALLS - 1):
        trial.proved("b", short)
    assert not trial.on_trial("b") and "b" not in trial.demoted
    trial.demote_s = 0.2
    trial.demote("a", "pre", slow)
    assert not trial.on_trial("a") and trial.demoted == {"a": round(slow * 1000, 3)}
    first = trial._standing["a"].back_on - time.monotonic()
    for _ in range(PROVE_CALLS):
        trial.proved("a", short)  # during its back-off: nothing counts
    trial.new_version("a")  # a new version does not cut a back-off short
    assert not trial.on_trial("a")
    time.sleep(max(0.0, trial._standing["a"].back_on - time.monotonic()) + 0.01)
    for _ in range(PROVE_CALLS):
        trial.proved("a", short)
    assert trial.on_trial("a")
    trial.new_version("a")  # served anew: proves itself again
    assert not trial.on_trial("a")
    for _ in range(PROVE_CALLS):
        trial.proved("a", short)
    trial.demote("a", "pre", slow)
    second = trial._standing["a"].back_on - time.monotonic()
    assert 1.6 * first < second <= 2 * trial.demote_s + 0.01  # twice as long
    trial.max_demoted = 2  # two demotions within demote_s: the trial pauses for everyone
    for _ in range(PROVE_CALLS):
        trial.proved("c", short)
    assert trial.on_trial("c")
    trial.demote("b", "pre", slow)
    assert not trial.on_trial("c") and set(trial.demoted) == {"a", "b"}
    off = LoopTrial("off", short_call_ms=0)
    for _ in range(PROVE_CALLS * 2):
        off.proved("a", 0.0)
    assert not off.on_trial("a")
