"""Per-subscriber isolation: a slow subscriber loses only its own events.

The storms are bounded (a fixed number of events, emitted in bursts with a short
pause, so the test measures isolation, not how a loaded machine schedules threads).
No assertion is about time: waits are flush() with a generous upper bound.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from wasmext.observe.events import Event, EventBus
from wasmext.observe.metrics import Metrics
from wasmext.testing import guest_wat

WAIT = 30.0  # an upper bound for flush() and close(), never an expectation
SLOW_S = 0.002


def storm(bus: EventBus, topic: str, count: int, burst: int = 250) -> None:
    """`count` events, payloads 0..count-1, in bursts of `burst` with a 1 ms pause."""
    for start in range(0, count, burst):
        for i in range(start, min(start + burst, count)):
            bus.emit(topic, i)
        time.sleep(0.001)


def dropped_metric(metrics: Metrics, subscriber: str) -> float:
    value = metrics.registry.get_sample_value("extension_events_dropped_total",
                                              {"subscriber": subscriber})
    return value or 0.0


def bursts_logged(caplog: pytest.LogCaptureFixture, subscriber: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "subscriber", None) == subscriber]


def event_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("wasmext-events-")]


def test_a_slow_subscriber_does_not_starve_a_fast_one(caplog: pytest.LogCaptureFixture) -> None:
    baseline = threading.active_count()
    metrics = Metrics()
    bus = EventBus(observer=metrics.record_event, drop_observer=metrics.record_event_dropped)
    slow_seen: list[int] = []
    fast_seen: list[int] = []

    def slow_cb(event: Event) -> None:
        time.sleep(SLOW_S)
        slow_seen.append(event.payload)

    slow = bus.subscribe("storm.*", slow_cb, name="slow")
    fast = bus.subscribe("storm.*", lambda e: fast_seen.append(e.payload), name="fast")
    n = 50_000
    with caplog.at_level(logging.WARNING, logger="wasmext.observe.events"):
        storm(bus, "storm.x", n)
        assert baseline < threading.active_count() <= baseline + 8  # the default cap
        assert bus.flush(WAIT)
        assert bus.close(WAIT)
    assert threading.active_count() == baseline  # every worker stopped

    # Isolation, not scheduling: the fast one may lose a little when a loaded machine
    # leaves its worker unscheduled for a burst, but never a share like the slow one's.
    assert fast.dropped * 10 < slow.dropped
    assert fast.delivered + fast.dropped == n
    assert slow.dropped > n // 2  # it keeps up with ~1 in 20: the rest are its own loss
    assert slow.delivered + slow.dropped == n
    # per-subscriber order: each sees a subsequence of the emit order
    assert fast_seen == sorted(fast_seen) and len(fast_seen) == fast.delivered
    assert slow_seen == sorted(slow_seen) and len(slow_seen) == slow.delivered
    # drops are counted per subscriber
    assert dropped_metric(metrics, "slow") == slow.dropped
    assert dropped_metric(metrics, "fast") == fast.dropped
    assert bus.counts["dropped"] == slow.dropped + fast.dropped
    # and logged once per burst, with the count: the storm is one burst for the slow one
    [record] = bursts_logged(caplog, "slow")
    assert record.levelno == logging.WARNING and record.__dict__["dropped"] == slow.dropped


def test_bursts_are_logged_once_each_when_the_queue_drains(
        caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics()
    bus = EventBus(drop_observer=metrics.record_event_dropped)
    gate = threading.Event()
    entered = threading.Event()

    def stuck(event: Event) -> None:
        entered.set()
        assert gate.wait(WAIT)

    sub = bus.subscribe("t", stuck, queue_size=4, name="stuck")
    try:
        with caplog.at_level(logging.WARNING, logger="wasmext.observe.events"):
            for burst in range(2):
                gate.clear()
                entered.clear()
                bus.emit("t", 0)
                assert entered.wait(WAIT)
                for i in range(10):  # 4 queued, 6 dropped
                    bus.emit("t", i)
                assert len(bursts_logged(caplog, "stuck")) == burst  # not while it lasts
                gate.set()
                assert bus.flush(WAIT)
        assert [r.__dict__["dropped"] for r in bursts_logged(caplog, "stuck")] == [6, 6]
        assert sub.dropped == 12 and dropped_metric(metrics, "stuck") == 12
    finally:
        gate.set()
        bus.close(WAIT)


def test_workers_are_capped_and_stop_on_close() -> None:
    baseline = threading.active_count()
    bus = EventBus(workers=2)
    gate = threading.Event()
    subs = [bus.subscribe("t", lambda e: gate.wait(WAIT), name=f"s{i}") for i in range(5)]
    for _ in range(3):
        bus.emit("t")
    assert threading.active_count() == baseline + 2  # 5 busy queues, 2 workers
    gate.set()
    assert bus.flush(WAIT)
    assert all(s.delivered == 3 for s in subs)  # the queues shared the two workers
    assert bus.close(WAIT)
    assert threading.active_count() == baseline


def test_a_plugin_subscriber_is_isolated_from_a_slow_python_one(wasmext_host: Any) -> None:
    listener = guest_wat(registration={"hooks": [{"hook": "on_event"}],
                                       "subscriptions": ["storm.*"]},
                         response={"ok": True})
    host = wasmext_host(
        (listener, {"plugin_id": "listener", "grants": {"events", "subscribe:storm.*"}}))
    bus, metrics = host.observe.bus, host.observe.metrics
    slow = bus.subscribe("storm.*", lambda e: time.sleep(SLOW_S), queue_size=200, name="slow")
    n = 5_000
    storm(bus, "storm.x", n, burst=20)  # an on_event call costs tens of microseconds
    assert bus.flush(WAIT)
    plugin_drops = dropped_metric(metrics, "listener")
    assert plugin_drops < n // 100
    assert host.plugins["listener"].plugin.calls == n - plugin_drops
    assert slow.dropped > n // 2 and dropped_metric(metrics, "slow") == slow.dropped
    host.close()
    assert event_workers() == []
