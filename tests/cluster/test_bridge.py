"""The event bus across two hosts over a real nats-server, under the same grants."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from wasmext.cluster.bridge import EventBridge
from wasmext.cluster.link import NatsLink
from wasmext.observe.events import Event, EventBus, EventDenied


def _wait(cond: Any, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_events_cross_hosts_under_the_topic_grants(nats_url: str) -> None:
    # host A: plugin "emitter" may emit ok.*; host B: plugin "reader" may subscribe to ok.*
    a = EventBus(may_emit=lambda pid, topic: pid == "emitter" and topic.startswith("ok."))
    b = EventBus(may_subscribe=lambda pid, pattern: pid == "reader" and pattern == "ok.*")
    got: list[tuple[str, Any]] = []
    seen_by_app: list[Event] = []
    lock = threading.Lock()

    def deliver(pid: str, topic: str, payload: Any) -> None:
        with lock:
            got.append((topic, payload))

    b.subscribe_plugin("reader", "ok.*", deliver)
    b.subscribe("*", seen_by_app.append)
    with pytest.raises(EventDenied):
        b.subscribe_plugin("stranger", "ok.*", deliver)
    bridge_a = EventBridge(a, nats_url, patterns=["*"])
    bridge_b = EventBridge(b, nats_url, patterns=["*"])
    try:
        a.emit_from("emitter", "ok.created", {"n": 1})
        with pytest.raises(EventDenied):
            a.emit_from("emitter", "secret.created", {"n": 2})
        _wait(lambda: got)
        assert got == [("ok.created", {"n": 1})]
        # Hostile traffic on the subjects: runtime namespaces and garbage are dropped.
        with NatsLink(nats_url) as link:
            for subject, body in (("wasmext.events.session.started",
                                   {"topic": "session.started", "payload": {}}),
                                  ("wasmext.events.ok.x", {"topic": "ok.other"})):
                link.run(link.client.publish(subject, json.dumps(body).encode()), 5)
            link.run(link.client.publish("wasmext.events.ok.y", b"[" * 100_000), 5)
            link.run(link.client.flush(), 5)
        _wait(lambda: bridge_b.dropped == 3)
        time.sleep(0.2)  # an echo would have come back by now
        assert (bridge_a.published, bridge_a.received) == (1, 0)
        assert bridge_b.published == 0  # what came in is not sent out again
        assert [e.topic for e in seen_by_app] == ["ok.created"]
        a.emit("ok.later", "still bridging")
        _wait(lambda: len(got) == 2)
    finally:
        bridge_a.close()
        bridge_b.close()
        a.close()
        b.close()


def test_a_worker_bridges_its_runtime_events(spawn: Any, nats_url: str,
                                             plugin_dir: Any) -> None:
    """`wasmext worker --events 'plugin.*'`: a fault on the worker is seen on NATS."""
    from cluster_support import registry

    from wasmext import Host, HostConfig, PipelineError, parse_policy
    from wasmext.cluster.remote import RemoteCaller
    from wasmext.cluster.routing import Router
    from wasmext.runtime import Runtime

    spawn("ev", "worker", "--nats", nats_url, "--plugins", str(plugin_dir), "--name", "ev",
          "--prefix", "ev", "--events", "plugin.*").wait_ready()
    seen: list[tuple[str, Any]] = []

    async def take(msg: Any) -> None:
        seen.append((msg.subject, json.loads(msg.data)))
    with NatsLink(nats_url) as link:
        link.run(link.client.subscribe("ev.events.>", cb=take), 5)
        link.run(link.client.flush(), 5)
        router = Router(parse_policy({"pre": [{"id": "burn"}]}),
                        RemoteCaller(registry("ev"), link))
        with Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as app, \
                app.session() as s, pytest.raises(PipelineError, match="out of fuel"):
            router.run(s, "x")
        _wait(lambda: seen)
    subject, event = seen[0]
    assert subject == "ev.events.plugin.faulted" and event["topic"] == "plugin.faulted"
    assert event["payload"]["plugin_id"] == "burn" and event["payload"]["reason"] == "out of fuel"


def test_a_plugins_event_too_big_for_nats_as_json_is_dropped_and_counted(
        nats_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Red team: 200 KB of control characters is within a plugin's emit caps but 1.2 MB
    as JSON, past the server's max_payload: each such event was a publish the client
    refused with a traceback per event, counted nowhere. Now dropped and counted, one
    warning; the next event crosses."""
    import logging

    import msgpack
    import wasmtime

    from wasmext.testing import DATA_AT, HOST_CALL_IMPORT, guest_wat, make_host

    raw = msgpack.packb({"op": "event.emit", "topic": "ok.big", "payload": "\x01" * 200_000})
    emitter = bytes(wasmtime.wat2wasm(guest_wat(
        f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
        imports=HOST_CALL_IMPORT, data=raw, registration={"hooks": [{"hook": "test"}]})))
    healthy = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "alive"})))
    other = EventBus(may_subscribe=lambda pid, pattern: True)
    got: list[str] = []
    other.subscribe_plugin("reader", "ok.*", lambda pid, topic, payload: got.append(topic))
    with make_host() as host:
        bridge = EventBridge(host.observe.bus, nats_url, patterns=["ok.*"], inbound=False)
        far = EventBridge(other, nats_url, patterns=[])
        try:
            plugin = host.add(emitter, plugin_id="emitter", grants={"events", "emit:ok.*"})
            with caplog.at_level(logging.WARNING, logger="wasmext"):
                started = time.monotonic()
                for _ in range(3):
                    plugin.call("test")
                assert host.observe.bus.flush(10)
                assert time.monotonic() - started < 10
            assert (bridge.dropped, bridge.published) == (3, 0)
            said = [r.getMessage() for r in caplog.records]
            assert len([m for m in said if "max_payload" in m]) == 1
            assert not any(r.exc_info for r in caplog.records)
            host.observe.bus.emit("ok.small", {"n": 1})
            _wait(lambda: got == ["ok.small"])
            assert host.add(healthy, plugin_id="healthy").call("test").value == "alive"
        finally:
            bridge.close()
            far.close()
            other.close()
