"""Periodic `on_tick` calls (ABI minor 2): bounded by the host's TickPolicy, run under
the plugin's own budgets, and coalesced (a slow tick never queues more ticks)."""

from __future__ import annotations

import threading
import time
from typing import Any

import msgpack
import wasmtime
from prometheus_client.parser import text_string_to_metric_families

from wasmext import Host, Runtime
from wasmext.config import HostConfig, parse_config
from wasmext.errors import TickRefused
from wasmext.services.ticks import Ticker, TickPolicy
from wasmext.testing import DATA_AT, guest_wat

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
COUNT = msgpack.packb({"op": "metric.add", "name": "ticks"})


def ticking(interval_ms: Any, *, body: str | None = None, minor: int = 2) -> bytes:
    """A guest whose every call (its on_tick) counts itself in its `ticks` counter."""
    call = body or f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(COUNT)}))"
    return bytes(wasmtime.wat2wasm(guest_wat(call, imports=HOST_CALL, data=COUNT, registration={
        "hooks": [{"hook": "on_tick"}], "abi_minor": minor, "tick": {"interval_ms": interval_ms},
        "metrics": [{"name": "ticks", "kind": "counter"}]})))


def host(**policy: int) -> Host:
    return Host(HostConfig(state_backend="memory", ticks=TickPolicy(**policy)),
                runtime=Runtime(cache=False), plugin_dirs=[])


def ticks_counted(h: Host, plugin: str) -> float:
    text = h.observe.metrics.exposition().decode()
    for family in text_string_to_metric_families(text):
        if family.name == f"wasmext_plugin_{plugin}__ticks":
            return next(s.value for s in family.samples if s.name.endswith("_total"))
    return 0.0


def test_a_plugin_ticks_at_its_interval_until_it_unloads() -> None:
    with host(min_interval_ms=50) as h:
        started = time.monotonic()
        h.add(ticking(50), plugin_id="tock")
        while ticks_counted(h, "tock") < 3 and time.monotonic() - started < 10:
            time.sleep(0.05)
        counted, elapsed = ticks_counted(h, "tock"), time.monotonic() - started
        assert 3 <= counted <= elapsed / 0.05 + 1  # never more often than the interval
        h.unload("tock")
        stopped = h.observe.ticks.ticks_run
        time.sleep(0.2)
        assert h.observe.ticks.ticks_run == stopped


def test_an_interval_below_the_policy_is_raised_to_it() -> None:
    with host(min_interval_ms=300) as h:
        h.add(ticking(1), plugin_id="eager")
        time.sleep(0.7)
        assert 1 <= ticks_counted(h, "eager") <= 2  # not ~700


def test_a_minor_1_guest_or_a_missing_hook_gets_no_ticks() -> None:
    with host(min_interval_ms=50) as h:
        h.add(ticking(50, minor=1), plugin_id="old")
        silent = bytes(wasmtime.wat2wasm(guest_wat(registration={
            "hooks": [{"hook": "test"}], "abi_minor": 2, "tick": {"interval_ms": 50}})))
        h.add(silent, plugin_id="hookless")
        time.sleep(0.3)
        assert h.observe.ticks.ticks_run == 0


def test_bad_requests_and_too_many_ticking_plugins_are_refused_by_name() -> None:
    with host(min_interval_ms=50, max_ticking_plugins=2) as h:
        h.add(ticking("soon"), plugin_id="words")
        for n in range(4):
            h.add(ticking(1000), plugin_id=f"t{n}")
        refused = [e for e in h.load_errors if isinstance(e, TickRefused)]
        assert [e.plugin_id for e in refused] == ["words", "t2", "t3"]
        assert "positive integer 'interval_ms'" in refused[0].message
        assert "the host's cap" in refused[1].message
        assert set(h.plugins) == {"words", "t0", "t1", "t2", "t3"}  # they still load


def test_the_policy_comes_from_the_host_config(tmp_path: Any) -> None:
    cfg = parse_config({"host": {"tick_min_interval_ms": 250, "max_ticking_plugins": 3}},
                       tmp_path / "wasmext.toml")
    assert cfg.ticks == TickPolicy(min_interval_ms=250, max_ticking_plugins=3)
    with Host(cfg, runtime=Runtime(cache=False), plugin_dirs=[]) as h:
        assert h.observe.ticks.policy.min_interval_ms == 250


def test_a_tick_that_never_ends_is_stopped_by_its_deadline_and_never_queues() -> None:
    """An endless on_tick every 20 ms with a 200 ms deadline: each tick ends in Timeout,
    the ticks it overlapped are coalesced, and the host keeps serving."""
    with host(min_interval_ms=20) as h:
        h.add(ticking(20, body="(loop $l (br $l)) (unreachable)"), plugin_id="spin",
              limits={"timeout_ms": 200, "fuel_per_call": 2**40}, failure="open")
        alive = h.add(bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "ok"}))),
                      plugin_id="healthy")
        started = time.monotonic()
        time.sleep(1.0)
        runs = h.observe.ticks.ticks_run
        assert 1 <= runs <= 6  # at most one every 200 ms, not 50 queued ones
        assert {f.reason for f in h.faults if f.plugin_id == "spin"} == {"timeout"}
        assert alive.call("test").value == "ok"
    assert time.monotonic() - started < 5  # closing waits for at most one tick


def test_missed_ticks_are_counted_not_run() -> None:
    """The ticker itself, with a deliver that takes 6 intervals: each tick says how many
    it coalesced, and no two run at once."""
    seen: list[int] = []
    running = threading.Lock()
    overlapped = []

    def deliver(plugin_id: str, hook: str, data: dict[str, int]) -> None:
        if not running.acquire(blocking=False):
            overlapped.append(plugin_id)
            return
        try:
            seen.append(data["missed"])
            time.sleep(0.3)
        finally:
            running.release()

    ticker = Ticker(deliver)
    try:
        ticker.start("slow", 50)
        time.sleep(1.3)
    finally:
        ticker.close()
    assert 2 <= len(seen) <= 5 and not overlapped
    assert seen[0] == 0 and all(m >= 4 for m in seen[1:]), seen
