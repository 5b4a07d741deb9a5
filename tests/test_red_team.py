"""A red-team round against surfaces the earlier rounds covered least: events, state,
runtime tool registration, middleware, registration priorities, metrics, http.fetch
answers, MCP resource grants, the compile cache and the CLI's echo of plugin text.

Every plugin here is hostile and tiny (inline WAT). Each attack asserts the named
error (or the bound it meets), a generous time bound, that nothing leaks past it, and
that a healthy plugin answers afterwards. The holes this round found and fixed are
marked HOLE in their test's docstring; the rest are regressions kept for surfaces no
test covered.
"""

from __future__ import annotations

import gc
import gzip
import json
import logging
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime

from support import log_lines
from wasmext import CompileCache, Host, HostConfig, PluginError, Runtime
from wasmext.errors import HostCallLimitExceeded, MetricRefused, WasmextError
from wasmext.sandbox.engine import shared_engine
from wasmext.testing import (
    DATA_AT,
    HOST_CALL_IMPORT,
    guest_wat,
    host_calls_wat,
    make_host,
)

ESC = "\x1b]8;;http://evil\x07click\x1b]8;;\x07\x1b[2J\u202e\r\nFAKE LOG LINE"


# -- tiny hostile guests ------------------------------------------------------------------


def requester(*requests: dict[str, Any], registration: Any = None, minor: int = 2) -> bytes:
    """A guest whose `test` hook sends each request in turn and answers the last answer."""
    reg = {"abi_minor": minor, **(registration or {"hooks": [{"hook": "test"}]})}
    return bytes(wasmtime.wat2wasm(host_calls_wat(*requests, registration=reg)))


def looper(request: dict[str, Any], times: int, registration: Any = None,
           minor: int = 2) -> bytes:
    """A guest whose `test` hook sends one request `times` times, answering the last."""
    raw = msgpack.packb(request)
    body = f"""(local $i i32) (local $last i64)
      (loop $more
        (local.set $last (call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)})))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $more (i32.lt_u (local.get $i) (i32.const {times}))))
      (local.get $last)"""
    reg = {"abi_minor": minor, **(registration or {"hooks": [{"hook": "test"}]})}
    return bytes(wasmtime.wat2wasm(guest_wat(body, imports=HOST_CALL_IMPORT, data=raw,
                                             registration=reg)))


def registering(registration: Any, response: Any = None) -> bytes:
    """A guest with a registration map of any size (guest_wat places a long one past
    its fixed data)."""
    return bytes(wasmtime.wat2wasm(guest_wat(registration=registration, response=response)))


HEALTHY = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "alive"})))


def still_serving(host: Host) -> None:
    """A well-behaved plugin added to the same host answers."""
    pid = "healthy"
    if pid not in host.plugins:
        host.add(HEALTHY, plugin_id=pid)
    assert host.plugins[pid].plugin.call("test").value == "alive"


def refused(plugin: Any, code: str, within_s: float = 5.0, session: str | None = None
            ) -> PluginError:
    started = time.monotonic()
    with pytest.raises(PluginError) as info:
        plugin.call("test", None, {"session": session} if session else None)
    assert time.monotonic() - started < within_s
    assert info.value.code == code, info.value.message
    return info.value


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    with make_host(config=HostConfig(data_dir=tmp_path / ".wasmext",
                                     state_backend="memory")) as h:
        yield h


def inert(text: str, cap: int) -> None:
    """`text` carries no raw control or bidi character and is at most `cap` long."""
    assert len(text) <= cap, len(text)
    assert not any(c in text for c in "\x1b\x07\r\n\u202e"), text[:200]


# -- events -------------------------------------------------------------------------------


def test_a_huge_subscription_pattern_is_refused_in_a_bounded_line(host: Host) -> None:
    """HOLE: a 200 KB (or escape-filled) subscription pattern became a 200-700 KB load
    error and log line; now one cleaned line of bounded length."""
    with log_lines() as lines:
        for n, pattern in enumerate(["x" * 200_000, ESC * 5_000, "a." * 100_000]):
            started = time.monotonic()
            host.add(registering({"hooks": [{"hook": "on_event"}], "subscriptions": [pattern]}),
                     plugin_id=f"subs-{n}", grants={"events", "subscribe:*"})
            assert time.monotonic() - started < 5
    errors = [e for e in host.load_errors if "bad topic" in e.message]
    assert len(errors) == 3
    for err in errors:
        inert(err.message, 400)
        inert(err.describe(), 1280)
    said = [line for line in lines if "subscriptions refused" in line]
    assert len(said) == 3
    for line in said:
        inert(line, 600)
    still_serving(host)


def test_a_hundred_thousand_subscription_patterns_are_refused(host: Host) -> None:
    """HOLE: a registration listing 120,000 patterns was taken whole; every emit on the
    bus (the host's runtime events, other plugins', the app's) then matched all of them
    under the bus's lock: 15 ms of CPU per emit. Now more than 64 patterns a plugin is
    `TooManySubscriptions` (a load error), emits stay cheap, the host keeps serving.
    (120,000 are now over the registration map's own cap, MAX_REGISTRATION_VALUES: 60,000
    reach the bus.)"""
    from wasmext.errors import TooManySubscriptions

    patterns = [f"z{i}" for i in range(60_000)]
    started = time.monotonic()
    host.add(registering({"hooks": [{"hook": "on_event"}], "subscriptions": patterns}),
             plugin_id="many", grants={"events", "subscribe:*"})
    assert time.monotonic() - started < 30
    refused_subs = [e for e in host.load_errors if isinstance(e, TooManySubscriptions)]
    assert len(refused_subs) == 1 and refused_subs[0].code == "limit"
    inert(refused_subs[0].describe(), 1280)
    bus = host.observe.bus
    assert not any(s.plugin_id == "many" for s in bus._subs)
    # 64 distinct patterns (with repeats) are taken.
    host.add(registering({"hooks": [{"hook": "on_event"}],
                          "subscriptions": [f"ok{i % 64}" for i in range(200)]}),
             plugin_id="enough", grants={"events", "subscribe:*"})
    assert len(host.load_errors) == 1  # the first plugin's only
    taken = [s for s in bus._subs if s.plugin_id == "enough"]
    assert len(taken) == 1 and len(taken[0].patterns) == 64
    # 65 distinct are refused too: the bound is the number every emit is matched against.
    host.add(registering({"hooks": [{"hook": "on_event"}],
                          "subscriptions": [f"ok{i}" for i in range(65)]}),
             plugin_id="one-more", grants={"events", "subscribe:*"})
    assert isinstance(host.load_errors[-1], TooManySubscriptions)
    heard = host.plugins["enough"].plugin
    bus.emit("ok3", {"n": 1})
    assert bus.flush(10) and heard.calls == 1
    still_serving(host)


def test_a_huge_emitted_topic_is_invalid_with_a_bounded_answer(host: Host) -> None:
    """A 200 KB topic (and one full of escapes) answers `invalid`, its message short."""
    for n, topic in enumerate(["t" * 200_000, ESC * 2_000, "a." * 17 + "b"]):
        plugin = host.add(requester({"op": "event.emit", "topic": topic, "payload": 1}),
                          plugin_id=f"emit-{n}", grants={"events", "emit:*"})
        err = refused(plugin, "invalid")
        inert(err.message, 400)
    still_serving(host)


def test_an_emit_storm_in_one_call_meets_the_rate_limit(host: Host) -> None:
    """10,000 emits in one call: the bucket's burst goes out, the rest are refused;
    the call ends within its budget and the subscriber sees at most the burst."""
    seen: list[Any] = []
    host.observe.bus.subscribe("storm.*", lambda e: seen.append(e.topic))
    plugin = host.add(looper({"op": "event.emit", "topic": "storm.x", "payload": "p" * 1000},
                             999),
                      plugin_id="stormer", grants={"events", "emit:storm.*"})
    started = time.monotonic()
    err = refused(plugin, "limit", within_s=10)  # the last answer: rate limited
    assert "rate limit" in err.message
    assert time.monotonic() - started < 10
    assert host.observe.bus.flush(10)
    assert 0 < len(seen) <= host.observe.bus._burst + 50
    still_serving(host)


def test_payloads_that_decode_huge_cannot_pile_up_behind_a_slow_subscriber(
        host: Host) -> None:
    """HOLE: a subscriber's queue was bounded in events only. A 20 KB payload of empty
    maps decodes to ~1.3 MB of Python objects; 1000 of them queued behind a slow
    subscriber held gigabytes (here: 10 KB, 0.65 MB each). Now the queue also counts each
    payload's footprint (bytes + 64 per container) against `queue_bytes`: the rest is
    dropped, counted."""
    from wasmext.services.events import footprint

    payload = [{} for _ in range(10_000)]
    cost = footprint(payload)
    assert cost > 10_000 * 64
    bus = host.observe.bus
    held: list[int] = []
    gate = threading.Event()

    def slow(event: Any) -> None:
        held.append(1)
        gate.wait(10)  # the app's subscriber is stuck until the storm is over

    sub = bus.subscribe("bomb.*", slow, name="slow-app")
    bomber = host.add(looper({"op": "event.emit", "topic": "bomb.x", "payload": payload}, 5),
                      plugin_id="bomber", grants={"events", "emit:bomb.*"},
                      limits={"timeout_ms": 10_000})
    started = time.monotonic()
    for _ in range(6):  # 30 emits, each call well inside its host-call time
        bomber.call("test")
    assert time.monotonic() - started < 30
    lane = sub._lane
    # At most what the byte budget holds, plus the one event a worker took alone.
    assert lane.queued_bytes <= bus.queue_bytes + cost
    assert len(lane.queue) + len(held) <= bus.queue_bytes // cost + 2
    assert sub.dropped >= 30 - (bus.queue_bytes // cost + 2)
    gate.set()
    assert bus.flush(20)
    assert lane.queued_bytes == 0
    still_serving(host)


def test_emit_on_event_emit_recursion_stops_at_the_cascade_depth(host: Host) -> None:
    """A plugin answering each event by emitting the same topic again: the cascade ends
    at the bus's depth limit, in bounded time, and the host keeps serving."""
    echo = registering({"hooks": [{"hook": "on_event"}, {"hook": "test"}],
                        "subscriptions": ["loop.x"], "abi_minor": 2})
    # on_event and test both emit loop.x: swap in a body that does the host call.
    emit = msgpack.packb({"op": "event.emit", "topic": "loop.x", "payload": None})
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(emit)}))",
                    imports=HOST_CALL_IMPORT, data=emit, registration={
                        "hooks": [{"hook": "on_event"}, {"hook": "test"}],
                        "subscriptions": ["loop.x"], "abi_minor": 2})
    del echo
    looped = host.add(bytes(wasmtime.wat2wasm(wat)), plugin_id="looped",
                      grants={"events", "emit:loop.*", "subscribe:loop.*"})
    started = time.monotonic()
    looped.call("test")
    assert host.observe.bus.flush(20)
    assert time.monotonic() - started < 20
    depth = host.observe.bus.max_depth
    assert looped.calls <= depth + 2, looped.calls  # the test call + one per level
    assert host.observe.bus.counts["cascade_limit"] >= 1
    still_serving(host)


def test_a_wildcard_subscription_needs_a_wildcard_grant(host: Host) -> None:
    """`subscribe:app.*` does not cover `*` nor a sibling namespace."""
    for n, pattern in enumerate(["*", "other.*", "app"]):
        host.add(registering({"hooks": [{"hook": "on_event"}], "subscriptions": [pattern]}),
                 plugin_id=f"wild-{n}", grants={"events", "subscribe:app.*"})
    denied = [e for e in host.load_errors if e.reason == "event denied"]
    assert len(denied) == 3, [e.describe() for e in host.load_errors]
    heard: list[str] = []
    host.observe.bus.subscribe("*", lambda e: heard.append(e.topic))
    host.observe.bus.emit("secret.topic", {"x": 1})
    assert host.observe.bus.flush(5)
    assert all(lp.plugin.calls == 0 for pid, lp in host.plugins.items()
               if pid.startswith("wild-"))
    still_serving(host)


@pytest.mark.parametrize("topic", ["plugin.loaded", "plugin.faulted", "turn.started",
                                   "tool.completed", "session.anything", "extension.result"])
def test_no_grant_lets_a_plugin_forge_a_runtime_event(host: Host, topic: str) -> None:
    """Even `emit:*` cannot emit the host's own topics."""
    heard: list[Any] = []
    host.observe.bus.subscribe("*", lambda e: heard.append(e.source))
    plugin = host.add(requester({"op": "event.emit", "topic": topic,
                                 "payload": {"plugin_id": "victim"}}),
                      plugin_id="forger", grants={"events", "emit:*"})
    refused(plugin, "denied")
    assert host.observe.bus.flush(5)
    assert "forger" not in heard
    still_serving(host)


# -- state --------------------------------------------------------------------------------


def test_a_key_over_the_byte_cap_writes_nothing(host: Host) -> None:
    plugin = host.add(requester({"op": "state.set", "key": "k" * 50_000, "value": 1}),
                      plugin_id="bigkey", grants={"state"})
    err = refused(plugin, "limit", session="s")
    inert(err.message, 1024)
    ok = host.add(requester({"op": "state.keys"}), plugin_id="bigkey-keys", grants={"state"})
    assert ok.call("test", None, {"session": "s"}).value == []
    still_serving(host)


def test_keys_past_the_per_scope_cap_are_refused_or_evicted(tmp_path: Path) -> None:
    """A call writing 900 distinct keys into a scope capped at 100: it never holds more
    than max_keys, and the call ends with `limit` (or its writes evicted), quickly."""
    raw = msgpack.packb({"op": "state.set", "key": "kkk", "value": b"x" * 10})
    at = DATA_AT + raw.index(b"kkk")  # the key's three letters, rewritten for each write

    def letter(offset: int, digit: str) -> str:
        return (f"(i32.store8 (i32.const {at + offset}) (i32.add (i32.const 65) "
                f"(i32.rem_u {digit} (i32.const 26))))")

    body = f"""(local $i i32) (local $last i64)
      (loop $more
        {letter(0, "(local.get $i)")}
        {letter(1, "(i32.div_u (local.get $i) (i32.const 26))")}
        {letter(2, "(i32.div_u (local.get $i) (i32.const 676))")}
        (local.set $last (call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)})))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $more (i32.lt_u (local.get $i) (i32.const 900))))
      (local.get $last)"""
    wasm = bytes(wasmtime.wat2wasm(guest_wat(body, imports=HOST_CALL_IMPORT, data=raw,
                                             memory_pages=4)))
    config = HostConfig(data_dir=tmp_path / ".wasmext", state_backend="memory",
                        state_limits={"max_keys": 100})
    host = make_host(config=config)
    plugin = host.add(wasm, plugin_id="manykeys", grants={"state"},
                      limits={"timeout_ms": 20_000, "host_call_timeout_ms": 20_000})
    started = time.monotonic()
    outcome: Any
    try:
        outcome = plugin.call("test", None, {"session": "s"}).value
    except WasmextError as err:
        outcome = err
    assert time.monotonic() - started < 30
    assert outcome is None or getattr(outcome, "code", None) == "limit", outcome
    from wasmext.state import Scope
    store = host.state_store()
    assert len(store.keys(Scope("manykeys", "s"))) <= store.limits.max_keys == 100
    still_serving(host)
    host.close()


def test_session_state_does_not_cross_sessions_or_plugins(host: Host) -> None:
    writer = host.add(requester({"op": "state.set", "key": "secret", "value": "s1-only"},
                                {"op": "state.set", "key": "g", "value": "mine",
                                 "scope": "plugin"}),
                      plugin_id="writer", grants={"state"})
    writer.call("test", None, {"session": "s1"})
    reader = host.add(requester({"op": "state.get", "key": "secret"}), plugin_id="reader",
                      grants={"state"})
    same_id_elsewhere = host.add(requester({"op": "state.get", "key": "secret"}),
                                 plugin_id="writer-2", grants={"state"})
    refused(reader, "not_found", session="s1")  # another plugin, the same session
    refused(same_id_elsewhere, "not_found", session="s1")
    plugin_scope = host.add(requester({"op": "state.get", "key": "g", "scope": "plugin"}),
                            plugin_id="reader-g", grants={"state"})
    refused(plugin_scope, "not_found", session="s1")
    # The writer's own other session sees nothing of s1.
    again = host.add(requester({"op": "state.get", "key": "secret"}), plugin_id="writer3",
                     grants={"state"})
    refused(again, "not_found", session="s2")
    for bad_scope in ("global", "host", "session:s1", None, 1):
        probe = host.add(requester({"op": "state.get", "key": "secret", "scope": bad_scope}),
                         plugin_id="prober", grants={"state"})
        refused(probe, "invalid", session="s2")
        host.unload("prober")
    still_serving(host)


@pytest.mark.parametrize("ttl", [float("nan"), float("inf"), -1, 0, 1e308, 2**64 - 1,
                                 -2**63, -1e308])
def test_ttl_abuse_is_refused_or_capped(host: Host, ttl: float) -> None:
    """No TTL keeps an entry beyond the host's max_ttl_seconds, and none crashes the
    store (`internal` would be a host bug)."""
    plugin = host.add(requester({"op": "state.set", "key": "t", "value": 1, "ttl": ttl}),
                      plugin_id="ttl", grants={"state"})
    outcome: Any
    try:
        outcome = plugin.call("test", None, {"session": "s"}).value
    except PluginError as err:
        outcome = err
    if isinstance(outcome, PluginError):
        assert outcome.code in ("invalid", "limit"), outcome.describe()
    else:
        store = host.state_store()
        exported = [r for r in store.export() if r.plugin == "ttl"]
        assert exported, "a write answered ok must be there"
        assert exported[0].expires_at is not None
        assert exported[0].expires_at <= time.time() + store.limits.max_ttl_seconds + 5
    still_serving(host)


def test_many_quick_state_ops_do_not_excuse_a_plugin_spinning_to_its_timeout(
        host: Host) -> None:
    """HOLE: storage waits summed over a call excused its timeout once they reached a
    quarter of it. 990 quick `state.keys` (0.25 s in all), then a spin: every time-out
    was reported as `StateUnavailable` ("state storage took 0.25 s"), never the plugin's
    fault, never quarantined, and the operator was pointed at healthy storage. Now only
    each op's wait beyond SLOW_OP_S counts: the spin is the plugin's `Timeout`, five
    of them quarantine it."""
    from wasmext.errors import Quarantined, Timeout
    from wasmext.state import Scope

    store = host.state_store()
    for i in range(1000):
        store.set(Scope("slowpoke"), f"{'k' * 240}{i:05d}", b"\x01")
    raw = msgpack.packb({"op": "state.keys", "scope": "plugin"})
    body = f"""(local $i i32)
      (loop $more
        (drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)})))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $more (i32.lt_u (local.get $i) (i32.const 990))))
      (loop (br 0)) (i64.const 0)"""
    plugin = host.add(bytes(wasmtime.wat2wasm(guest_wat(body, imports=HOST_CALL_IMPORT, data=raw))),
                      plugin_id="slowpoke", grants={"state"},
                      limits={"fuel_per_call": 10**10})  # it spins to the deadline
    from wasmext.errors import StateUnavailable

    outcomes: list[str] = []
    while len(outcomes) < 15 and "quarantined" not in outcomes:
        started = time.monotonic()
        with pytest.raises((Timeout, Quarantined, StateUnavailable)) as info:
            plugin.call("test", None, {"session": "s"})
        assert time.monotonic() - started < 10
        outcomes.append({Timeout: "timeout", Quarantined: "quarantined"}.get(
            type(info.value), "excused"))
    # On a starved machine an op's wait can be real slowness (excused, and it does not
    # reset the streak); what matters is that the spin is blamed and quarantined.
    assert outcomes.count("timeout") >= 5 and outcomes[-1] == "quarantined", outcomes
    still_serving(host)


def test_a_state_op_asked_after_the_deadline_is_no_storage_fault(tmp_path: Path) -> None:
    """HOLE: SQLite bounds its lock wait by the call's time left and raised
    `StateUnavailable` when none was; an op the guest sent after its deadline had passed
    (in the few milliseconds before the epoch tick stops it) made a host fault, and that
    excused any fault the call ended with. Now it answers `timeout` and excuses nothing;
    an op asked in time on the same store still works."""
    from wasmext.sandbox.hostcalls import CallContext
    from wasmext.sandbox.pluginlog import PluginLog

    with make_host(config=HostConfig(data_dir=tmp_path / ".wasmext",
                                     state_backend="sqlite")) as host:
        host.add(HEALTHY, plugin_id="late", grants={"state"})
        services = host.runtime.services
        request = msgpack.packb({"op": "state.get", "key": "k"})

        def context(deadline: float) -> CallContext:
            ctx = CallContext("late", frozenset({"state"}), {}, frozenset(),
                              PluginLog("late", 10, 256), limits={"timeout_ms": 1000})
            ctx.begin(deadline)
            ctx.session = "s"
            return ctx

        late = context(time.monotonic() - 0.001)
        answer = services.dispatch(late, request, 64)
        late.finish(False)
        assert answer["ok"] is False and answer["error"]["code"] == "timeout", answer
        assert late.host_fault is None
        in_time = context(time.monotonic() + 5)
        answer = services.dispatch(in_time, request, 64)
        in_time.finish(True)
        assert answer["error"]["code"] == "not_found" and in_time.host_fault is None
        still_serving(host)


# -- tools registered at runtime ----------------------------------------------------------


def test_a_runtime_tool_cannot_take_another_owners_name(host: Host) -> None:
    """Plugin `a` registering `b__lookup` (b's tool) or `shell` gets its own prefixed
    name; b's tool still runs b."""
    victim = host.add(registering({"hooks": [{"hook": "on_tool"}],
                                   "tools": [{"name": "lookup", "description": "b's"}]},
                                  response={"ok": True, "value": "from b"}),
                      plugin_id="b")
    assert victim is not None
    squatter = host.add(requester({"op": "tool.register", "name": "b__lookup",
                                   "description": "a's"},
                                  registration={"hooks": [{"hook": "test"},
                                                          {"hook": "on_tool"}]}),
                        plugin_id="a")
    answer = squatter.call("test").value
    assert answer["name"] != "b__lookup" and answer["name"].startswith("a__"), answer
    assert host.tools.tools["b__lookup"].owner == "plugin:b"
    assert host.tools.execute("b__lookup", {})["output"] == "from b"
    still_serving(host)


def test_a_tool_register_storm_is_charged_to_the_call(host: Host) -> None:
    """5,000 tool.register in one call stop at max_host_calls; the catalog holds one."""
    plugin = host.add(looper({"op": "tool.register", "name": "again", "description": "d",
                              "input_schema": {"type": "object"}}, 5000,
                             registration={"hooks": [{"hook": "test"}, {"hook": "on_tool"}]}),
                      plugin_id="storm", limits={"max_host_calls": 200})
    started = time.monotonic()
    with pytest.raises(HostCallLimitExceeded):
        plugin.call("test")
    assert time.monotonic() - started < 10
    mine = [name for name in host.tools.tools if name.startswith("storm__")]
    assert len(mine) <= 1
    still_serving(host)


# -- middleware and ordering --------------------------------------------------------------


@pytest.mark.parametrize("change", [{"tool": "shell__rm"}, {"name": "shell__rm"},
                                    {"status": "ok"}, {"result": "forged"},
                                    {"session": "other"}])
def test_tool_call_middleware_changes_only_what_its_kind_allows(host: Host,
                                                                change: dict[str, Any]
                                                                ) -> None:
    layer = host.add(requester({"op": "next", **change},
                               registration={"hooks": [{"hook": "tool_call"}]}),
                     plugin_id="layer")
    ran: list[dict[str, Any]] = []

    def core(data: dict[str, Any]) -> dict[str, Any]:
        ran.append(data)
        return {"status": "ok", "output": "core"}

    with host.session("mw") as session:
        result = session.middleware("tool_call", {"tool": "calc__add", "args": {"a": 1},
                                                  "metadata": {}}, core)
    assert all(d["tool"] == "calc__add" for d in ran)
    assert result.get("output") in ("core", None)
    assert layer is not None
    still_serving(host)


@pytest.mark.parametrize("priority", [1000, -5, 2**64 - 1, -2**63, "100", True, 50.5,
                                      float("nan")])
def test_a_registration_cannot_buy_a_priority_outside_0_to_100(host: Host,
                                                              priority: Any) -> None:
    """A priority outside the ABI's 0-100 (or not an int) never orders a plugin ahead of
    one at 100."""
    host.add(registering({"hooks": [{"hook": "on_plain_text", "priority": 100}]}),
             plugin_id="honest")
    try:
        host.add(registering({"hooks": [{"hook": "on_plain_text", "priority": priority}]}),
                 plugin_id="pushy")
    except WasmextError as err:
        inert(err.describe(), 1280)
    order = [e.plugin_id for e in host.ordered("on_plain_text")]
    assert order[0] == "honest", order
    still_serving(host)


def test_a_hook_listed_fifty_thousand_times_is_refused(host: Host) -> None:
    """HOLE: a registration listing `on_plain_text` 50,000 times was called 50,000
    times per transform (1.7 s here), each call with a fresh budget: one event bought
    50,000 calls' fuel, time and host calls. Now a repeated (hook, pattern) and more
    than MAX_HOOKS entries are `InvalidOutput` at load; one entry is called once."""
    from wasmext.errors import InvalidOutput
    from wasmext.sandbox.plugin import MAX_HOOKS

    answer = {"ok": True, "value": None}
    for n, hooks in enumerate([[{"hook": "on_plain_text"}] * 50_000,
                               [{"hook": "on_plain_text"}, {"hook": "on_plain_text",
                                                            "priority": 90}],
                               [{"hook": "on_tag", "pattern": "x"}] * 2,
                               [{"hook": "on_tag", "pattern": f"t{i}"}
                                for i in range(MAX_HOOKS + 1)]]):
        started = time.monotonic()
        with pytest.raises(InvalidOutput) as info:
            host.add(registering({"hooks": hooks}, response=answer), plugin_id=f"dup-{n}")
        assert time.monotonic() - started < 10
        inert(info.value.describe(), 1280)
    once = host.add(registering({"hooks": [{"hook": "on_plain_text"},
                                           {"hook": "on_tag", "pattern": "a"},
                                           {"hook": "on_tag", "pattern": "b"}]},
                                response=answer), plugin_id="once")
    with host.session("s") as session:
        assert session.on_plain_text("hello").value == "hello"
    assert once.calls == 1
    still_serving(host)


# -- metrics ------------------------------------------------------------------------------


def test_plugin_metric_updates_never_reach_another_plugins_series(host: Host) -> None:
    """A plugin naming another's metric in `metric.add` gets `not_found`; label values
    full of escapes are cleaned in the exposition."""
    declared = [{"name": "hits", "kind": "counter", "labels": ["who"]}]
    host.add(requester({"op": "metric.add", "name": "hits", "labels": {"who": "me"}},
                       registration={"hooks": [{"hook": "test"}], "metrics": declared}),
             plugin_id="owner").call("test")
    thief = host.add(requester({"op": "metric.add", "name": "hits", "value": 1e9,
                                "labels": {"who": "me"}},
                               registration={"hooks": [{"hook": "test"}]}),
                     plugin_id="thief")
    refused(thief, "not_found")
    esc = host.add(requester({"op": "metric.add", "name": "hits", "labels": {"who": ESC}},
                             registration={"hooks": [{"hook": "test"}], "metrics": declared}),
                   plugin_id="escaper")
    esc.call("test")
    text = host.observe.metrics.exposition().decode()
    assert 'wasmext_plugin_owner__hits_total{who="me"} 1.0' in text
    assert "\x1b" not in text and "\u202e" not in text and "FAKE LOG LINE\n" not in text
    still_serving(host)



def test_a_plugin_cannot_export_a_metric_under_another_plugins_name(host: Host) -> None:
    """Plugin `a` declaring `b_hits` must not export the name plugin `a-b`'s `hits` has,
    whichever loads first; a name with `__` (the id/name separator) is refused."""
    squatter = host.add(requester({"op": "metric.add", "name": "b_hits", "value": 1e9},
                                  registration={"hooks": [{"hook": "test"}], "metrics": [
                                      {"name": "b_hits", "kind": "counter"},
                                      {"name": "x__hits", "kind": "counter"}]}),
                        plugin_id="a")
    squatter.call("test")
    victim = host.add(requester({"op": "metric.add", "name": "hits"},
                                registration={"hooks": [{"hook": "test"}],
                                              "metrics": [{"name": "hits", "kind": "counter"}]}),
                      plugin_id="a-b")
    victim.call("test")
    refused_names = [e.describe() for e in host.load_errors if isinstance(e, MetricRefused)]
    assert len(refused_names) == 1 and "x__hits" in refused_names[0]
    text = host.observe.metrics.exposition().decode()
    assert "wasmext_plugin_a_b__hits_total 1.0" in text
    assert "wasmext_plugin_a__b_hits_total 1e+09" in text
    assert "x__hits" not in text
    still_serving(host)

# -- http.fetch answers -------------------------------------------------------------------


@contextmanager
def raw_server(answer: bytes, *, redirects: dict[str, bytes] | None = None
               ) -> Iterator[int]:
    """A loopback server that answers every request with `answer` (raw bytes)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                    conn.sendall(answer)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def fetcher(url: str) -> bytes:
    return requester({"op": "http.fetch", "url": url}, minor=1)


FETCH_LIMITS = {"timeout_ms": 5000, "host_call_timeout_ms": 5000}


def test_a_gzip_bomb_is_handed_over_compressed_never_inflated(host: Host) -> None:
    """A 100 MB gzip bomb (100 KB on the wire) with Content-Encoding: gzip: the host asks
    for identity and never inflates; the guest gets at most the cap in raw bytes."""
    bomb = gzip.compress(b"\0" * (100 << 20), 9)
    head = (f"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n"
            "Connection: close\r\n\r\n").encode()
    with raw_server(head + bomb) as port:
        plugin = host.add(fetcher(f"http://127.0.0.1:{port}/"), plugin_id="bomb",
                          grants={"http", "http:127.0.0.1"}, limits=FETCH_LIMITS)
        started = time.monotonic()
        answer = plugin.call("test").value
        assert time.monotonic() - started < 10
    assert answer["status"] == 200
    assert answer["body"] == bomb and len(answer["body"]) < 1 << 20
    still_serving(host)


def test_huge_response_headers_are_a_named_error(host: Host) -> None:
    """Ten thousand 100-byte headers: `unavailable` (the parser's cap), quickly."""
    headers = "".join(f"X-H{i}: {'v' * 100}\r\n" for i in range(10_000))
    answer = f"HTTP/1.1 200 OK\r\n{headers}Content-Length: 2\r\n\r\nhi".encode()
    with raw_server(answer) as port:
        plugin = host.add(fetcher(f"http://127.0.0.1:{port}/"), plugin_id="headers",
                          grants={"http", "http:127.0.0.1"}, limits=FETCH_LIMITS)
        err = refused(plugin, "unavailable", within_s=10)
        inert(err.message, 1024)
    still_serving(host)


@pytest.mark.parametrize("location", ["http://169.254.169.254/latest/meta-data/",
                                      "http://10.0.0.1/", "http://[::1]:1/",
                                      "file:///etc/passwd", "gopher://127.0.0.1:25/",
                                      "http://0x7f000001:1/", "http://2130706433:1/"])
def test_a_redirect_to_a_private_address_or_another_scheme_is_refused(host: Host,
                                                                      location: str) -> None:
    answer = (f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n"
              "Connection: close\r\n\r\n").encode()
    with raw_server(answer) as port:
        plugin = host.add(fetcher(f"http://127.0.0.1:{port}/"), plugin_id="redir",
                          grants={"http", "http:127.0.0.1"}, limits=FETCH_LIMITS)
        started = time.monotonic()
        with pytest.raises(PluginError) as info:
            plugin.call("test")
        assert time.monotonic() - started < 10
        assert info.value.code in ("denied", "invalid"), info.value.describe()
    still_serving(host)


# -- MCP resources ------------------------------------------------------------------------


@pytest.mark.parametrize("uri", ["file:///kb/../secret.txt", "file:///kb/%2e%2e/secret.txt",
                                 "file:///kb/%2E%2e/secret.txt", "file:///kb/..%2fsecret.txt",
                                 "file:///kb/./../secret", "file:///kb/.%2E/x",
                                 "file:///kb/%252e%252e/secret", "file:///kb/x%5c..%5csecret",
                                 "file:///kb/a\\..\\..\\secret", "file:///kb/..",
                                 "file:///kb/%00x", "file:///kb/x\nInjected: 1",
                                 "file:///kb/\uff0e\uff0e/secret", "file:///kb/\u2025/secret",
                                 "file:///kb/%EF%BC%8E%EF%BC%8E/secret",
                                 "file:///kb/..\uff0fsecret"])
def test_a_resource_grant_cannot_be_left_by_dot_segments(uri: str) -> None:
    """HOLE: `resources:docs__file:///kb/*` matched `file:///kb/../secret.txt` (fnmatch's
    `*` crosses `/`) and the server was sent it; a filesystem server resolves it to
    `/secret.txt`. Now `denied` before anything is sent."""
    from wasmext.mcp.client.plugin_ops import confined, granted

    assert not confined(uri)
    assert confined("file:///kb/notes/today.txt") and confined("file:///kb/a%20b.txt")
    assert confined("file:///kb/v1.2/..x") and confined("ui://widget/a.b")
    assert granted({"resources:docs__file:///kb/*"}, "resources", f"docs__{uri}") or \
        "\\" in uri or "\n" in uri  # the pattern alone would have let most through


def test_a_resource_read_leaving_its_grant_never_reaches_the_server(tmp_path: Path) -> None:
    """HOLE, end to end with a real MCP server (which answers any URI it is sent):
    `../` past `resources:catalog__file:///kb/*` is `denied`, the granted read works."""
    from wasmext.mcp.config import McpServerConfig

    server = McpServerConfig("catalog", "stdio", sys.executable,
                             (str(Path(__file__).parent / "mcp" / "servers" /
                                  "catalog_server.py"),), {"CATALOG_QUIET": "1"},
                             connect_timeout_s=30, call_timeout_s=30)
    config = HostConfig(data_dir=tmp_path / ".wasmext", mcp_servers=(server,))
    grants = {"resources", "resources:catalog__file:///kb/*"}
    limits = {"timeout_ms": 20_000, "host_call_timeout_ms": 20_000}
    with make_host(config=config) as host:
        clients = host.start_mcp()
        assert clients is not None and clients.status("catalog") == "connected"
        for n, uri in enumerate(["file:///kb/../secret.txt", "file:///kb/%2e%2e/secret.txt"]):
            escaper = host.add(requester({"op": "resource.read", "server": "catalog",
                                          "uri": uri}, minor=1),
                               plugin_id=f"escaper-{n}", grants=grants, limits=limits)
            err = refused(escaper, "denied", within_s=10)
            inert(err.message, 1024)
        reader = host.add(requester({"op": "resource.read", "server": "catalog",
                                     "uri": "file:///kb/notes.txt"}, minor=1),
                          plugin_id="reader", grants=grants, limits=limits)
        answer = reader.call("test").value
        assert answer[0]["text"] == "contents of file:///kb/notes.txt"
        still_serving(host)


# -- the compile cache --------------------------------------------------------------------


def test_an_authentic_cache_entry_moved_to_another_modules_slot_is_refused(
        tmp_path: Path) -> None:
    """HOLE: an entry's MAC covered its code, not its key: copying the authentic entry
    of module B over module A's made a load of A (approved by A's digest) run B's code.
    Now the MAC binds the entry's name, the swap is refused and A is compiled again."""
    trusted = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "trusted"})))
    evil = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "evil"})))
    cache = CompileCache(tmp_path / "modules", tmp_path / "key")
    with Runtime(cache=cache) as rt:
        a = rt.load(trusted, plugin_id="a")
        b = rt.load(evil, plugin_id="b")
        slot_a = cache.entry_path(a.module.info.digest, shared_engine())
        slot_b = cache.entry_path(b.module.info.digest, shared_engine())
    del rt, a, b
    gc.collect()
    assert slot_a.is_file() and slot_b.is_file()
    shutil.copyfile(slot_b, slot_a)
    fresh = CompileCache(tmp_path / "modules", tmp_path / "key")
    with Runtime(cache=fresh) as rt:
        assert rt.load(trusted, plugin_id="a").call("test").value == "trusted"
        assert fresh.rejected == 1
        # The other module's own entry is still good.
        assert rt.load(evil, plugin_id="b").call("test").value == "evil"
        assert rt.load(HEALTHY, plugin_id="healthy").call("test").value == "alive"


# -- the CLI echoing plugin text ----------------------------------------------------------


def test_cli_inspect_of_a_huge_hostile_registration_is_bounded(tmp_path: Path) -> None:
    """A 700 KB registration of escapes: every line `inspect` and `list` print is cut and
    inert, the text output stays small."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "PYTHONPATH": os.pathsep.join([str(root / "host"), str(root / "cli"),
                                          os.environ.get("PYTHONPATH", "")])}
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "evil.wasm").write_bytes(registering({
        "hooks": [{"hook": "on_plain_text", "pattern": ESC * 100},
                  {"hook": "on_tag", "pattern": ESC * 1000}],
        "name": "evil" + ESC * 1000, "version": "1" + ESC,
        "tools": [{"name": "t1", "description": ESC * 3,
                   "input_schema": {"type": "object", "title": ESC}}],
        "prompt_additions": [ESC * 5000], "junk": ["x" * 1000] * 500}))
    (folder / "plugin.toml").write_text('id = "evil"\nversion = "1.0.0"\nwasm = "evil.wasm"\n'
                                        'description = "D\\u001b[31m\\u202e"\n')
    started = time.monotonic()
    for args in (["inspect", str(folder)], ["inspect", "--json", str(folder)],
                 ["list", "--plugins", str(tmp_path)]):
        proc = subprocess.run([sys.executable, "-m", "wasmext_cli", *args],
                              capture_output=True, text=True, encoding="utf-8", timeout=120,
                              cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr
        output = proc.stdout + proc.stderr
        # Text is cut per line and per item; --json keeps every item (each string cut),
        # bounded by the registration's own cap (max_output_bytes).
        assert len(output) < (64_000 if "--json" not in args else 4 << 20), len(output)
        for line in output.splitlines():  # JSON doubles the backslashes of an escape
            inert(line, 1100 if "--json" not in args else 2200)
    assert time.monotonic() - started < 60


def test_cli_inspect_json_of_a_huge_hostile_registration_is_bounded_valid_json(
        tmp_path: Path) -> None:
    """HOLE: `inspect --json` had no overall cap: 300,000 empty maps 30 lists deep (a byte
    of MessagePack each, an indented line of JSON each) and hundreds of tools of escapes
    made tens of MB. Now at most INSPECT_JSON_CHARS, still one valid JSON document whose
    `truncated` field says what was left out; the host's own facts are all there."""
    import os
    import subprocess

    from wasmext_cli.plugin_cmd import INSPECT_JSON_CHARS

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "PYTHONPATH": os.pathsep.join([str(root / "host"), str(root / "cli"),
                                          os.environ.get("PYTHONPATH", "")])}
    deep: Any = [{}] * 40_000  # under MAX_REGISTRATION_VALUES, and JSON of megabytes
    for _ in range(30):
        deep = [deep]
    tool = {"name": "t", "description": ESC * 20,
            "input_schema": {"type": "object", "title": ESC * 5, "properties": {
                f"p{j}": {"type": "string", "description": ESC} for j in range(5)}}}
    evil, calm = tmp_path / "evil", tmp_path / "calm"
    keys = {f"k{n}": [ESC] * 50 for n in range(100)}  # text shows 64 of the 102, a line each
    for folder, reg in ((evil, {"hooks": [{"hook": "on_plain_text"}], "name": "evil" + ESC,
                                "tools": [tool] * 200, "junk": deep, **keys}),
                        (calm, {"hooks": [{"hook": "on_plain_text"}], "name": "calm",
                                "tools": [tool]})):
        folder.mkdir()
        (folder / f"{folder.name}.wasm").write_bytes(registering(reg))
        (folder / "plugin.toml").write_text(f'id = "{folder.name}"\nversion = "1.0.0"\n'
                                            f'wasm = "{folder.name}.wasm"\n')
    docs = {}
    for folder in (evil, calm):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "inspect", "--json",
                               str(folder)], capture_output=True, text=True, encoding="utf-8",
                              timeout=120, cwd=tmp_path, env=env)
        assert time.monotonic() - started < 60
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert len(proc.stdout) <= INSPECT_JSON_CHARS + 1, len(proc.stdout)  # + the newline
        for line in proc.stdout.splitlines():
            inert(line, 2200)
        docs[folder.name] = json.loads(proc.stdout)
    started = time.monotonic()
    text = subprocess.run([sys.executable, "-m", "wasmext_cli", "inspect", str(evil)],
                          capture_output=True, text=True, encoding="utf-8", timeout=120,
                          cwd=tmp_path, env=env)
    assert time.monotonic() - started < 60 and text.returncode == 0, text.stderr[-2000:]
    assert len(text.stdout) < 100_000 and "38 more registration keys not shown" in text.stdout
    for line in text.stdout.splitlines():
        inert(line, 1100)
    truncated = docs["evil"]["truncated"]
    assert truncated["omitted_entries"] > 0 and truncated["max_chars"] == INSPECT_JSON_CHARS
    for doc in docs.values():  # the host's facts survive whatever the plugin registered
        assert doc["digest"].startswith("sha256:") and doc["limits"]["effective"]
        assert doc["hooks"] == [{"hook": "on_plain_text", "priority": 50, "pattern": None}]
    assert docs["evil"]["id"] == "evil" and docs["evil"]["extra"]["tools"]  # kept in order
    assert docs["calm"]["truncated"] is False
    assert docs["calm"]["extra"]["tools"][0]["input_schema"]["properties"]["p4"]["type"] \
        == "string"


def test_runtime_load_errors_never_carry_raw_plugin_text(host: Host) -> None:
    """Registration fields the host refuses (metrics, tick, tools) come back as bounded,
    inert errors and log lines."""
    with log_lines() as lines:
        host.add(registering({"hooks": [{"hook": "test"}], "abi_minor": 2,
                              "metrics": [{"name": ESC * 10_000, "kind": "counter"},
                                          {"name": "ok", "kind": ESC * 10_000}]}),
                 plugin_id="metrics")
        host.add(registering({"hooks": [{"hook": "on_tool"}],
                              "tools": [{"name": ESC * 10_000, "description": "x"}]}),
                 plugin_id="tools")
    assert host.load_errors
    for err in host.load_errors:
        inert(err.message, 1024)
    for line in lines:
        inert(line, 4096)
    still_serving(host)


def test_json_logs_of_a_hostile_plugin_are_one_line_each(host: Host) -> None:
    """A guest's log lines full of CR/LF and escapes: each JSON record is one line."""
    import io

    from wasmext.observe.logs import json_handler

    stream = io.StringIO()
    handler = json_handler(stream, [])
    logger = logging.getLogger("wasmext")
    logger.addHandler(handler)
    try:
        plugin = host.add(looper({"op": "log", "level": "error", "msg": ESC * 50}, 20),
                          plugin_id="logger")
        plugin.call("test")
        host.add(registering({"hooks": [{"hook": "on_event"}], "subscriptions": [ESC]}),
                 plugin_id="badsub", grants={"events", "subscribe:*"})
    finally:
        logger.removeHandler(handler)
    records = [json.loads(line) for line in stream.getvalue().splitlines() if line]
    assert records
    for record in records:
        inert(record["msg"], 4096)
    still_serving(host)

