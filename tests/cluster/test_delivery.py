"""Delivery semantics (docs/cluster.md): nothing runs after its caller gave up, nothing
applies twice. A frozen worker drops the requests it thaws to unrun; an attempt
retried after its worker died between the state commit and the reply is answered
without committing again. The `tally` stage adds one to a counter in its state."""

from __future__ import annotations

import asyncio
import hashlib
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from cluster_support import wat_plugin
from nats.errors import TimeoutError as NatsTimeout
from prometheus_client import generate_latest

from wasmext import Host, HostConfig, Limits, PipelineError, load_config, parse_policy
from wasmext.cluster.contract import DEADLINE_HEADER, ExtMessage, ExtRef, ExtRequest
from wasmext.cluster.contract import encode as contract_encode
from wasmext.cluster.link import NatsLink
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.cluster.worker import Worker
from wasmext.config import open_store
from wasmext.host import Host as HostType
from wasmext.runtime import Runtime
from wasmext.sandbox.codec import decode, encode
from wasmext.state import Scope
from wasmext.testing import DATA_AT, RESPONSE_AT, guest_wat, packed

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'


def tally_plugin(parent: Path) -> str:
    """A pre stage that reads `n` (plugin scope, a small int) and writes n + 1; its digest."""
    get = msgpack.packb({"op": "state.get", "key": "n", "scope": "plugin"})
    put = msgpack.packb({"op": "state.set", "key": "n", "scope": "plugin", "value": 0})
    put_at = DATA_AT + 64
    resp = msgpack.packb({"ok": True, "value": {"message": {"payload": "tallied",
                                                            "metadata": {}}}})
    # The answer of state.get is {"ok": true, "value": n}: n is its last byte (a fixint),
    # and so is the value of the state.set request.
    body = f"""(local $r i64)
      (local.set $r (call $host_call (i32.const {DATA_AT}) (i32.const {len(get)})))
      (i32.store8 (i32.const {put_at + len(put) - 1})
        (i32.add (i32.const 1) (i32.load8_u (i32.sub (i32.add
          (i32.wrap_i64 (i64.shr_u (local.get $r) (i64.const 32))) (i32.wrap_i64 (local.get $r)))
          (i32.const 1)))))
      (drop (call $host_call (i32.const {put_at}) (i32.const {len(put)})))
      (i64.const {packed(RESPONSE_AT, len(resp))})"""
    data = get + b"\0" * (64 - len(get)) + put
    wat = guest_wat(body, imports=HOST_CALL, data=data,
                    response={"ok": True, "value": {"message": {"payload": "tallied",
                                                                "metadata": {}}}},
                    registration={"hooks": [{"hook": "pre"}], "name": "tally"})
    wasm = bytes(wasmtime.wat2wasm(wat))
    folder = parent / "tally"
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text('id = "tally"\nversion = "1.0.0"\nabi = 1\n')
    (folder / "tally.wasm").write_bytes(wasm)
    return hashlib.sha256(wasm).hexdigest()


def tally_config(tmp_path: Path, backend: str = "sqlite") -> Path:
    digest = tally_plugin(tmp_path / "plugins")
    config = tmp_path / "wasmext.toml"
    config.write_text(f'[host]\ndata_dir = "{tmp_path / "data"}"\n'
                      f'[state]\nbackend = "{backend}"\n'
                      f'[plugins]\nworkspace_dir = "{tmp_path / "plugins"}"\n'
                      f'[grants.tally]\ndigest = "sha256:{digest}"\ncapabilities = ["state"]\n')
    return config


def count(store: Any) -> int:
    raw = store.get(Scope("tally"), "n")
    return -1 if raw is None else int(decode(raw))


def tally_router(link: NatsLink, prefix: str, timeout_ms: int, retry: int) -> Router:
    reg = parse_registry({"tally": {"type": "pre", "subject": f"{prefix}.ext.pre.tally.v1",
                                    "timeout_ms": timeout_ms, "retry": retry,
                                    "breaker": {"failures": 1000}}})
    return Router(parse_policy({"pre": [{"id": "tally", "mode": "required"}]}),
                  RemoteCaller(reg, link))


@pytest.fixture
def app() -> Iterator[HostType]:
    """The calling host: no plugins of its own."""
    with Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as host:
        yield host


def test_a_frozen_worker_drops_what_it_thaws_to_unrun(spawn: Any, nats_url: str,
                                                      tmp_path: Path, app: HostType) -> None:
    config = tally_config(tmp_path)
    store = open_store(load_config(config))  # the workers' store (SQLite in data_dir)
    store.set(Scope("tally"), "n", encode(0))
    frozen = spawn("f1", "worker", "--nats", nats_url, "--config", str(config), "--name", "f1",
                   "--prefix", "frozen").wait_ready()
    spawn("f2", "worker", "--nats", nats_url, "--config", str(config), "--name", "f2",
          "--prefix", "frozen").wait_ready()
    runs = 8
    with NatsLink(nats_url, name="caller") as link:
        router = tally_router(link, "frozen", timeout_ms=400, retry=10)
        frozen.proc.send_signal(signal.SIGSTOP)
        try:
            for n in range(runs):
                started = time.monotonic()
                with app.session() as s:
                    assert router.run(s, f"m{n}").message["payload"] == "tallied"
                assert time.monotonic() - started < 8  # 11 attempts of 400 ms at most
        finally:
            frozen.proc.send_signal(signal.SIGCONT)
        assert router.caller is not None
        stats = router.caller.stats["tally"]
        sent_to_frozen = stats.timeouts
        assert sent_to_frozen >= 1  # the frozen worker was sent some (random: ~half)
        assert set(stats.by_worker) == {"f2"}

        def dropped() -> int:
            return len(re.findall(r"dropped a pre request for tally unrun",
                                  frozen.log_path.read_text()))
        deadline = time.monotonic() + 8
        while dropped() < sent_to_frozen and time.monotonic() < deadline:
            time.sleep(0.05)
        # Each expired request the frozen worker got is dropped, none run. A caller's
        # wait starts before its request is published, so on a loaded machine an
        # attempt can time out before it ever left: a timeout, never delivered.
        assert 1 <= dropped() <= sent_to_frozen
        assert count(store) == runs  # each run's state written once
        with app.session() as s:  # healthy afterwards, the thawed worker too
            for n in range(6):
                assert router.run(s, f"after{n}").message["payload"] == "tallied"
        assert count(store) == runs + 6
    store.close()


class DiesAfterCommit(Worker):
    """A worker killed between its state commit and its reply (once): the reply is
    never sent and its connection goes, as when the process dies there."""

    died = threading.Event()

    def _answer(self, *_: Any) -> Any:
        # Every stage call's outcome passes here, inline or from the lane, after its
        # state commit: the answer is not sent, the connection closes instead.
        async def killed() -> None:
            DiesAfterCommit.died.set()
            assert self._nc is not None
            await self._nc.close()

        return killed()


class InThread:
    """A Worker on its own event loop thread."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(worker.start(), self.loop).result(15)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.worker.drain(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_a_retry_after_a_kill_between_commit_and_reply_does_not_commit_again(
        nats_url: str, tmp_path: Path, app: HostType) -> None:
    config = tally_config(tmp_path, backend="memory")
    with Host(load_config(config), runtime=Runtime(cache=False)) as serving:
        store = serving.state_store()
        store.set(Scope("tally"), "n", encode(0))
        dying = InThread(DiesAfterCommit(serving, nats_url, prefix="killed", name="k1"))
        healthy: InThread | None = None
        try:
            with NatsLink(nats_url, name="caller") as link:
                router = tally_router(link, "killed", timeout_ms=1500, retry=2)
                box: dict[str, Any] = {}

                def call() -> None:
                    started = time.monotonic()
                    with app.session() as s:
                        box["result"] = router.run(s, "once")
                    box["took"] = time.monotonic() - started
                caller = threading.Thread(target=call)
                caller.start()
                assert DiesAfterCommit.died.wait(10)
                assert count(store) == 1  # the first attempt's commit landed
                healthy = InThread(Worker(serving, nats_url, prefix="killed", name="k2"))
                caller.join(20)
                assert box["result"].message["payload"] == "tallied"  # the retry answered
                assert box["took"] < 10
                assert count(store) == 1  # ... and did not commit again
                counts = healthy.worker.counts["killed.ext.pre.tally.v1"]
                assert (counts.answered, counts.duplicate) == (1, 1)
                assert ('extension_worker_requests_total{extension="tally",outcome="duplicate",'
                        'subject="killed.ext.pre.tally.v1",worker="k2"} 1.0'
                        ) in generate_latest(serving.observe.metrics.registry).decode()
                assert router.caller is not None
                assert router.caller.stats["tally"].by_worker == {"k2": 1}
                with app.session() as s:  # a new call is a new key: it commits
                    assert router.run(s, "next").message["payload"] == "tallied"
                assert count(store) == 2
        finally:
            if healthy is not None:
                healthy.stop()
            dying.loop.call_soon_threadsafe(dying.loop.stop)


def test_a_run_budget_bounds_every_attempt_and_the_worker_honours_it(
        spawn: Any, nats_url: str, tmp_path: Path, app: HostType) -> None:
    config = tally_config(tmp_path)
    store = open_store(load_config(config))  # the workers' store (SQLite in data_dir)
    store.set(Scope("tally"), "n", encode(0))
    lone = spawn("b1", "worker", "--nats", nats_url, "--config", str(config), "--name", "b1",
                 "--prefix", "budget").wait_ready()
    with NatsLink(nats_url, name="caller") as link:
        router = tally_router(link, "budget", timeout_ms=5000, retry=5)
        lone.proc.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            with app.session() as s, pytest.raises(PipelineError,
                                                   match="call tree's time is up"):
                router.run(s, "late", budget_ms=600)  # not 6 attempts of 5 s
            assert time.monotonic() - started < 3
        finally:
            lone.proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 15
        while "dropped a pre request for tally unrun" not in lone.log_path.read_text():
            assert time.monotonic() < deadline, lone.log_path.read_text()[-2000:]
            time.sleep(0.05)
        assert count(store) == 0  # the request it held carried the run's deadline
        with app.session() as s:  # healthy afterwards
            assert router.run(s, "now", budget_ms=5000).message["payload"] == "tallied"
        assert count(store) == 1
    store.close()


def test_a_request_runs_no_longer_than_its_deadline(nats_url: str, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    wat_plugin(plugins, "stamp", "pre", {"message": {"payload": "stamped", "metadata": {}}})
    spin = plugins / "spin"
    spin.mkdir()
    (spin / "plugin.toml").write_text('id = "spin"\nversion = "1.0.0"\nabi = 1\n')
    (spin / "spin.wasm").write_bytes(bytes(wasmtime.wat2wasm(guest_wat(
        "(loop $l (br $l)) (i64.const 0)",
        registration={"hooks": [{"hook": "pre"}], "name": "spin"}))))
    config = HostConfig(limits=Limits(timeout_ms=20_000, fuel_per_call=10**13))
    with Host(config, runtime=Runtime(cache=False, defaults=config.limits),
              plugin_dirs=[("workspace", plugins)]) as serving:
        worker = InThread(Worker(serving, nats_url, prefix="bound", name="d1"))
        try:
            with NatsLink(nats_url, name="caller") as link:
                body = encode_request("spin")
                started = time.monotonic()
                msg = link.request("bound.ext.pre.spin.v1", body, {
                    DEADLINE_HEADER: str(int((time.time() + 0.4) * 1000))}, 10)
                took = time.monotonic() - started
                assert msg.headers is not None
                assert msg.headers.get("Nats-Service-Error-Code") == "500"
                assert "timeout" in msg.headers.get("Nats-Service-Error", "")
                assert took < 3  # the request's 400 ms, not the plugin's own 20 s
                # The caller's deadline is not the plugin's fault: nothing counts
                # towards a quarantine.
                spun = serving.plugins["spin"].plugin
                assert spun.last_fault is None and not spun.quarantined
                answer = link.request("bound.ext.pre.stamp.v1", encode_request("stamp"), {}, 10)
                assert b"stamped" in answer.data  # a healthy stage answers afterwards
                # A request already past its deadline is dropped unrun, unanswered.
                late = {DEADLINE_HEADER: str(int((time.time() - 1) * 1000))}
                with pytest.raises((NatsTimeout, TimeoutError)):
                    link.request("bound.ext.pre.stamp.v1", encode_request("stamp"), late, 1)
            counts = worker.worker.counts["bound.ext.pre.stamp.v1"]
            assert (counts.answered, counts.expired) == (1, 1)
            metrics = generate_latest(serving.observe.metrics.registry).decode()
            assert ('extension_worker_requests_total{extension="stamp",outcome="expired",'
                    'subject="bound.ext.pre.stamp.v1",worker="d1"} 1.0') in metrics
            assert ('extension_worker_requests_total{extension="spin",outcome="failed",'
                    'subject="bound.ext.pre.spin.v1",worker="d1"} 1.0') in metrics
        finally:
            worker.stop()


def encode_request(ext_id: str) -> bytes:
    """A CP-Ext request for `ext_id`, as JSON."""
    return contract_encode(ExtRequest(
        trace_id=f"t-{ext_id}", tenant_id="default", extensions=ExtRef(id=ext_id),
        message=ExtMessage(message_id="m", message_type="chat", payload="x")))
