"""A worker whose instance pool is full (`[host] instance_pool`, sandbox.engine) says so
to its caller as the host's limit, on a real nats-server: the caller raises
InstancePoolFull as an in-process host does, blames no plugin, and the next call once a
slot is free answers. A pipeline stage on such a worker is answered 503, which its
caller tries again (another worker may have room)."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import wasmtime
from cluster_support import ThreadedWorker

from wasmext import Host, PipelineError, parse_policy
from wasmext.cluster.link import NatsLink
from wasmext.cluster.plugins import attach_remote
from wasmext.cluster.registry import RemotePluginEntry, parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.config import HostConfig, parse_config
from wasmext.errors import InstancePoolFull
from wasmext.sandbox.plugin import Plugin
from wasmext.testing import guest_wat

POOL = 3


@pytest.fixture(scope="module")
def worker(nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadedWorker]:
    folder = tmp_path_factory.mktemp("pool-full-plugins") / "steady"
    folder.mkdir()
    (folder / "plugin.toml").write_text('id = "steady"\nversion = "1.0.0"\nabi = 1\n')
    (folder / "steady.wasm").write_bytes(bytes(wasmtime.wat2wasm(guest_wat(
        response={"ok": True, "value": "alive"},
        registration={"hooks": [{"hook": "on_plain_text"}]}))))
    config = dataclasses.replace(parse_config({"host": {"instance_pool": POOL}}),
                                 data_dir=tmp_path_factory.mktemp("pool-full-data"))
    host = Host(config, plugin_dirs=[("workspace", folder.parent)])
    assert not host.load_errors, host.load_errors
    w = ThreadedWorker(host, nats_url, name="crowded", concurrency=2)
    yield w
    w.close()


@pytest.fixture
def caller(tmp_path: Path, nats_url: str) -> Iterator[Host]:
    """A host whose only plugin is the worker's, by proxy."""
    host = Host(HostConfig(data_dir=tmp_path / "caller"), plugin_dirs=[])
    with NatsLink(nats_url, name="pool-full-test") as link:
        attach_remote(host, link, {"steady": RemotePluginEntry(
            id="steady", subject="wasmext.plugin.steady.v1", timeout_ms=5000,
            attempt_ms=5000)})
        yield host
    host.close()


def test_a_workers_full_pool_is_the_hosts_limit_at_the_caller(
        worker: ThreadedWorker, caller: Host, caplog: pytest.LogCaptureFixture) -> None:
    served = worker.host.plugins["steady"].plugin
    assert isinstance(served, Plugin) and worker.host.runtime.engine.pooled
    served.close()  # its idle instance goes: a call needs a new one
    held = [served.new_instance() for _ in range(POOL)]
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            started = time.monotonic()
            with caller.session() as session:
                with pytest.raises(InstancePoolFull) as caught:
                    caller.try_call("steady", "on_plain_text", "hello", session)
                failed = [e.detail or "" for e in session.trace.events if e.outcome == "failed"]
            assert time.monotonic() - started < 5
            message = str(caught.value)
            assert "on worker crowded" in message and "instance_pool" in message
            assert caught.value.plugin_id == "steady"
            assert failed and failed[0].startswith("instance pool full: ")
    proxy = caller.plugins["steady"].plugin
    assert not caller.faults and not proxy.quarantined and not served.quarantined
    assert not [r for r in caplog.records if "steady" in r.getMessage()
                and "failed" in r.getMessage()]  # no "plugin steady failed" line
    held.clear()
    result, reason = caller.try_call("steady", "on_plain_text", "hello")
    assert reason is None and result is not None and result.value == "alive"


@pytest.fixture(scope="module")
def stage_worker(nats_url: str, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[ThreadedWorker]:
    """A worker serving a `pre` stage (`stamp`) under its own prefix, pool of POOL."""
    folder = tmp_path_factory.mktemp("pool-full-stage") / "stamp"
    folder.mkdir()
    (folder / "plugin.toml").write_text('id = "stamp"\nversion = "1.0.0"\nabi = 1\n')
    (folder / "stamp.wasm").write_bytes(bytes(wasmtime.wat2wasm(guest_wat(
        response={"ok": True, "value": {"message": {"payload": "stamped"}}},
        registration={"hooks": [{"hook": "pre"}], "name": "stamp"}))))
    config = dataclasses.replace(parse_config({"host": {"instance_pool": POOL}}),
                                 data_dir=tmp_path_factory.mktemp("pool-full-stage-data"))
    host = Host(config, plugin_dirs=[("workspace", folder.parent)])
    assert not host.load_errors, host.load_errors
    w = ThreadedWorker(host, nats_url, name="crowded-stage", prefix="poolfull")
    yield w
    w.close()


def test_a_stage_on_a_full_worker_is_a_503_its_caller_tries_again(
        stage_worker: ThreadedWorker, nats_url: str) -> None:
    """The worker's own limit answers 503 (not a plugin's 500): the caller spends its
    retry on it, the stage fails naming the worker and the limit, nobody is blamed, and
    once a slot is free the same router answers."""
    served = stage_worker.host.plugins["stamp"].plugin
    assert isinstance(served, Plugin) and stage_worker.host.runtime.engine.pooled
    served.close()
    held = [served.new_instance() for _ in range(POOL)]
    with NatsLink(nats_url, name="pool-full-stage-test") as link, \
            Host(HostConfig(), plugin_dirs=[]) as app:
        router = Router(parse_policy({"pre": [{"id": "stamp", "mode": "required"}]}),
                        RemoteCaller(parse_registry({"stamp": {
                            "type": "pre", "subject": "poolfull.ext.pre.stamp.v1",
                            "timeout_ms": 5000, "retry": 1}}), link))
        started = time.monotonic()
        with app.session() as session, pytest.raises(PipelineError) as caught:
            router.run(session, "hello")
        assert time.monotonic() - started < 5
        assert "error 503: instance pool full on worker crowded-stage" in caught.value.message
        assert router.caller is not None
        stats = router.caller.stats["stamp"]
        assert (stats.retries, stats.failed, stats.ok) == (1, 1, 0)
        assert not stage_worker.host.faults and not served.quarantined
        held.clear()
        with app.session() as session:
            got = router.run(session, "hello")
        assert got.message["payload"] == "stamped"
        assert (stats.retries, stats.ok) == (1, 1)
