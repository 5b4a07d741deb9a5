"""The event bus: grants, delivery off the emitter's stack, bounded queues, rate limits.

No test measures time: waits are flush() or threading.Event, clocks are fakes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from wasmext.errors import CapabilityDenied
from wasmext.observe.events import (
    RUNTIME_EVENTS,
    BusClosed,
    CascadeLimit,
    Event,
    EventBus,
    EventDenied,
    InvalidTopic,
    RateLimited,
    check_pattern,
    check_topic,
    grants_predicate,
    pattern_covers,
    runtime_event,
    topic_matches,
)

WAIT = 10.0  # an upper bound for flush(), never an expectation


@pytest.fixture
def make_bus() -> Iterator[Callable[..., EventBus]]:
    buses: list[EventBus] = []

    def make(**kwargs: Any) -> EventBus:
        bus = EventBus(**kwargs)
        buses.append(bus)
        return bus

    yield make
    for bus in buses:
        bus.close(WAIT)


class Gate:
    """A subscriber that blocks inside its first delivery until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.seen: list[Any] = []

    def __call__(self, event: Event) -> None:
        self.entered.set()
        assert self.opened.wait(WAIT)
        self.seen.append(event.payload)


@pytest.mark.parametrize(("pattern", "topic", "expected"), [
    ("*", "turn.started", True),
    ("turn.*", "turn.started", True),
    ("turn.*", "turn", False),
    ("turn.*", "turnx.started", False),
    ("plugin.a.*", "plugin.a.x.y", True),
    ("plugin.a.*", "plugin.ab.x", False),
    ("turn.started", "turn.started", True),
    ("turn.started", "turn.completed", False),
])
def test_topic_matches(pattern: str, topic: str, expected: bool) -> None:
    assert topic_matches(pattern, topic) is expected


@pytest.mark.parametrize("bad", ["", ".", "a..b", "a.", "a b", "a/b", "a.**", 7, None,
                                 "x" * 65, ".".join(["a"] * 17), "é"])
def test_bad_topics_and_patterns(bad: object) -> None:
    with pytest.raises(InvalidTopic) as info:
        check_pattern(bad)
    assert info.value.code == "invalid"
    with pytest.raises(InvalidTopic):
        check_topic(bad)


def test_pattern_covers() -> None:
    assert pattern_covers("*", "turn.*")
    assert pattern_covers("plugin.a.*", "plugin.a.x")
    assert pattern_covers("plugin.a.*", "plugin.a.x.*")
    assert not pattern_covers("plugin.a.*", "*")
    assert not pattern_covers("plugin.a.x", "plugin.a.*")
    assert not pattern_covers("plugin.a.*", "plugin.b.x")


def test_python_subscriber_gets_events_in_order(make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus()
    seen: list[Event] = []
    bus.subscribe("app.*", seen.append)
    for i in range(200):
        assert bus.emit("app.tick", {"i": i}) == 1
    assert bus.emit("other.tick") == 0
    assert bus.flush(WAIT)
    assert [e.payload["i"] for e in seen] == list(range(200))
    assert all(e.source is None and e.topic == "app.tick" for e in seen)
    assert [e.seq for e in seen] == sorted(e.seq for e in seen)


def test_grants_are_required_to_emit_and_subscribe(make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus(may_emit=grants_predicate({"a": ["plugin.a.*"], "root": ["*"]}),
                   may_subscribe=grants_predicate({"b": ["plugin.a.*"]}))
    got: list[tuple[str, str, Any]] = []
    with pytest.raises(EventDenied) as info:
        bus.subscribe_plugin("b", ["plugin.a.*", "turn.*"], lambda *a: got.append(a))
    assert info.value.code == "denied" and isinstance(info.value, CapabilityDenied)
    assert bus.emit_from("a", "plugin.a.hello", [1]) == 0  # the refused subscription is absent
    bus.subscribe_plugin("b", "plugin.a.*", lambda *a: got.append(a))
    assert bus.emit_from("a", "plugin.a.hello", [1]) == 1
    for who, topic in [("a", "plugin.b.x"), ("b", "plugin.a.x"), ("nobody", "x")]:
        with pytest.raises(EventDenied):
            bus.emit_from(who, topic)
    assert bus.flush(WAIT)
    assert got == [("b", "plugin.a.hello", [1])]
    assert bus.counts["denied"] == 4


@pytest.mark.parametrize("topic", [*RUNTIME_EVENTS, "turn.custom", "session.x"])
def test_plugins_cannot_forge_runtime_events(make_bus: Callable[..., EventBus],
                                             topic: str) -> None:
    bus = make_bus(may_emit=lambda pid, t: True)
    with pytest.raises(EventDenied):
        bus.emit_from("root", topic, {})


def test_default_bus_denies_plugins(make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus()
    with pytest.raises(EventDenied):
        bus.emit_from("a", "plugin.a.x")
    with pytest.raises(EventDenied):
        bus.subscribe_plugin("a", "*", lambda *a: None)


def test_runtime_event_payloads(make_bus: Callable[..., EventBus]) -> None:
    payload = runtime_event("turn.started", turn_id="t1", agent_name="a", instance_key="k")
    assert list(payload) == list(RUNTIME_EVENTS["turn.started"])
    assert isinstance(payload["timestamp"], int)
    with pytest.raises(ValueError, match="missing"):
        runtime_event("turn.started", turn_id="t1")
    with pytest.raises(ValueError, match="unknown"):
        runtime_event("session.started", session_id="s", colour="red")
    with pytest.raises(ValueError, match="not a standard"):
        runtime_event("turn.paused")
    assert {t.split(".")[0] for t in RUNTIME_EVENTS} == {"turn", "step", "tool", "session",
                                                         "plugin", "extension"}
    bus = make_bus(may_subscribe=lambda pid, p: True)
    got: list[tuple[str, str, Any]] = []
    bus.subscribe_plugin("audit", "session.*", lambda *a: got.append(a))
    bus.emit_runtime("session.started", session_id="s1", timestamp=5)
    assert bus.flush(WAIT)
    assert got == [("audit", "session.started", {"session_id": "s1", "timestamp": 5})]


def test_full_queue_drops_are_counted_and_the_emitter_never_waits(
        make_bus: Callable[..., EventBus]) -> None:
    noted: list[tuple[str, str]] = []
    bus = make_bus(observer=lambda who, outcome: noted.append((who, outcome)))
    gate = Gate()
    sub = bus.subscribe("t", gate, queue_size=2)
    bus.emit("t", 0)
    assert gate.entered.wait(WAIT)  # the worker is stuck inside the subscriber
    queued = [bus.emit("t", i) for i in range(1, 6)]  # returns although nothing is delivered
    assert queued == [1, 1, 0, 0, 0]
    assert sub.dropped == 3 and bus.counts["dropped"] == 3
    assert noted.count(("_app", "dropped")) == 3
    gate.opened.set()
    assert bus.flush(WAIT)
    assert gate.seen == [0, 1, 2]
    assert sub.delivered == 3


def test_a_failing_subscriber_does_not_stop_the_others(
        make_bus: Callable[..., EventBus], caplog: pytest.LogCaptureFixture) -> None:
    bus = make_bus(may_subscribe=lambda pid, p: True)
    seen: list[Any] = []

    def broken(plugin_id: str, topic: str, payload: Any) -> None:
        raise RuntimeError("subscriber bug")

    bad = bus.subscribe_plugin("flaky", "t", broken)
    bus.subscribe("t", lambda e: seen.append(e.payload))
    with caplog.at_level(logging.ERROR, logger="wasmext.observe.events"):
        for i in range(3):
            bus.emit("t", i)
        assert bus.flush(WAIT)
    assert seen == [0, 1, 2]
    assert bad.failed == 3 and bus.counts["failed"] == 3 and bus.counts["delivered"] == 3
    failures = [r for r in caplog.records if getattr(r, "plugin_id", None) == "flaky"]
    assert len(failures) == 3 and all(r.exc_info for r in failures)


def test_emitting_from_a_subscriber_does_not_recurse(make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus()
    emitter = threading.current_thread()
    inside_a = threading.Event()
    log: list[str] = []

    def on_a(event: Event) -> None:
        inside_a.set()
        log.append("a start")
        bus.emit("b", "from a")  # queued, not delivered on this stack
        log.append("a end")
        inside_a.clear()

    def on_b(event: Event) -> None:
        assert not inside_a.is_set()
        assert threading.current_thread() is not emitter
        log.append(f"b {event.payload} depth {event.depth}")

    bus.subscribe("a", on_a)
    bus.subscribe("b", on_b)
    bus.emit("a")
    assert bus.flush(WAIT)
    assert log == ["a start", "a end", "b from a depth 1"]
    assert bus.counts["failed"] == 0


def test_event_loops_are_cut_at_max_depth(make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus(max_depth=5)
    errors: list[CascadeLimit] = []

    def echo(event: Event) -> None:
        try:
            bus.emit("loop", event.depth)
        except CascadeLimit as exc:
            errors.append(exc)

    bus.subscribe("loop", echo)
    bus.emit("loop", 0)
    assert bus.flush(WAIT)  # terminates: the chain is cut
    assert len(errors) == 1 and errors[0].code == "limit"
    assert bus.counts["delivered"] == 6 and bus.counts["cascade_limit"] == 1


def test_event_storm_is_rate_limited_per_plugin(make_bus: Callable[..., EventBus]) -> None:
    now = [100.0]
    bus = make_bus(may_emit=lambda pid, t: True, rate=2.0, burst=5, clock=lambda: now[0])
    results = [_try(bus, "storm") for _ in range(1000)]
    assert results.count(True) == 5 and results[:5] == [True] * 5
    assert bus.counts["rate_limited"] == 995
    with pytest.raises(RateLimited) as info:
        bus.emit_from("storm", "plugin.storm.x")
    assert info.value.code == "limit" and info.value.plugin_id == "storm"
    bus.emit_from("calm", "plugin.calm.x")  # another plugin has its own bucket
    now[0] += 1.5  # 2 events/s: 3 tokens
    assert [_try(bus, "storm") for _ in range(4)] == [True, True, True, False]
    for _ in range(50):  # the host and the app are not rate-limited
        bus.emit("host.tick")
    bus.set_rate_limit("storm", rate=0.0, burst=1)
    assert [_try(bus, "storm") for _ in range(3)] == [True, False, False]


def _try(bus: EventBus, plugin_id: str) -> bool:
    try:
        bus.emit_from(plugin_id, f"plugin.{plugin_id}.x")
    except RateLimited:
        return False
    return True


def test_unsubscribe(make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus(may_subscribe=lambda pid, p: True)
    seen: list[Any] = []
    handle = bus.subscribe("t", lambda e: seen.append(("py", e.payload)))
    plugin = bus.subscribe_plugin("p", ["t", "u"], lambda pid, t, p: seen.append((pid, p)))
    bus.emit("t", 1)
    assert bus.flush(WAIT)
    handle()
    plugin.close()
    plugin.close()  # idempotent
    assert bus.emit("t", 2) == 0
    assert bus.flush(WAIT)
    assert sorted(seen) == [("p", 1), ("py", 1)]
    assert not handle.active and not plugin.active


def test_queued_events_of_a_closed_subscription_are_skipped(
        make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus()
    gate = Gate()
    handle = bus.subscribe("t", gate)
    bus.emit("t", 1)
    assert gate.entered.wait(WAIT)
    bus.emit("t", 2)
    handle.close()
    gate.opened.set()
    assert bus.flush(WAIT)
    assert gate.seen == [1]  # the delivery already running finished; the queued one did not
    assert bus.counts["skipped"] == 1


def test_one_plugin_never_receives_two_events_at_once(
        make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus(workers=4, may_subscribe=lambda pid, p: True)
    lock = threading.Lock()
    running = {"now": 0, "max": 0, "n": 0}

    def deliver(plugin_id: str, topic: str, payload: Any) -> None:
        with lock:
            running["now"] += 1
            running["max"] = max(running["max"], running["now"])
            running["n"] += 1
        with lock:
            running["now"] -= 1

    bus.subscribe_plugin("p", "a.*", deliver)
    bus.subscribe_plugin("p", "a.b", deliver)  # a second subscription, the same plugin
    others: list[Any] = []
    bus.subscribe("a.*", others.append)
    for _ in range(300):
        bus.emit("a.b")
    assert bus.flush(WAIT)
    assert running == {"now": 0, "max": 1, "n": 600}
    assert len(others) == 300


def test_flush_inside_a_subscriber_is_refused(make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus()
    errors: list[BaseException] = []

    def bad(event: Event) -> None:
        try:
            bus.flush(1.0)
        except RuntimeError as exc:
            errors.append(exc)

    bus.subscribe("t", bad)
    bus.emit("t")
    assert bus.flush(WAIT)
    assert len(errors) == 1


def test_close_delivers_then_refuses(make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus(may_subscribe=lambda pid, p: True)
    seen: list[Any] = []
    bus.subscribe("t", lambda e: seen.append(e.payload))
    for i in range(10):
        bus.emit("t", i)
    assert bus.close(WAIT)
    assert seen == list(range(10))
    with pytest.raises(BusClosed) as info:
        bus.emit("t")
    assert info.value.code == "unavailable"
    with pytest.raises(BusClosed):
        bus.subscribe("t", seen.append)
    assert bus.close(WAIT)  # twice is fine


def test_close_discards_what_it_cannot_deliver(make_bus: Callable[..., EventBus]) -> None:
    bus = make_bus()
    gate = Gate()
    bus.subscribe("t", gate)
    for i in range(4):
        bus.emit("t", i)
    assert gate.entered.wait(WAIT)
    drained = bus.close(timeout=0)
    gate.opened.set()
    assert drained is False
    assert bus.flush(WAIT)
    assert gate.seen == [0]
    assert bus.counts["discarded"] == 3


def test_grant_predicate_errors_deny(make_bus: Callable[..., EventBus]) -> None:
    def broken(plugin_id: str, topic: str) -> bool:
        raise KeyError(plugin_id)

    bus = make_bus(may_emit=broken)
    with pytest.raises(EventDenied):
        bus.emit_from("a", "plugin.a.x")
