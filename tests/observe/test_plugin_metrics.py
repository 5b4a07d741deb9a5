"""Plugin-defined metrics (ABI minor 2): declared in the registration map, updated with
metric.add / metric.set / metric.observe, exported under the plugin's namespace in the
host's Prometheus exposition, capped by the host's MetricPolicy."""

from __future__ import annotations

import time
from typing import Any

import msgpack
import pytest
import wasmtime
from prometheus_client.parser import text_string_to_metric_families

from wasmext import Host, PluginError, Runtime
from wasmext.config import HostConfig
from wasmext.errors import MetricLimit, MetricRefused
from wasmext.observe.pluginmetrics import MetricPolicy
from wasmext.testing import DATA_AT, guest_wat, packed, wat_bytes

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
DECLARED = [{"name": "cache_hits", "kind": "counter", "help": "Cache hits", "labels": ["tier"]},
            {"name": "queue_depth", "kind": "gauge"},
            {"name": "latency_ms", "kind": "histogram", "buckets": [1, 10, 100]}]


def caller(requests: list[dict[str, Any]], *, minor: int = 2,
           metrics: Any = DECLARED) -> bytes:
    """A guest whose `test` hook sends `requests` as host calls in order and answers the
    last answer; its registration declares `metrics`."""
    raws = [msgpack.packb(r) for r in requests]
    offsets, at = [], DATA_AT
    for raw in raws:
        offsets.append(at)
        at += len(raw)
    calls = [f"(call $host_call (i32.const {o}) (i32.const {len(r)}))"
             for o, r in zip(offsets, raws, strict=True)]
    body = "".join(f"(drop {c})" for c in calls[:-1]) + calls[-1]
    reg = {"hooks": [{"hook": "test"}], "abi_minor": minor, "metrics": metrics}
    return bytes(wasmtime.wat2wasm(guest_wat(body, imports=HOST_CALL, data=b"".join(raws),
                                             registration=reg)))


def host() -> Host:
    return Host(HostConfig(state_backend="memory"), runtime=Runtime(cache=False),
                plugin_dirs=[])


def still_serving(h: Host) -> None:
    """A well-behaved plugin loaded afterwards into the same host answers."""
    alive = h.add(bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "alive"}))),
                  plugin_id="healthy")
    assert alive.call("test").value == "alive"


def families(h: Host) -> dict[str, Any]:
    text = h.observe.metrics.exposition().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_declared_metrics_are_updated_and_exported_under_the_plugin_namespace() -> None:
    with host() as h:
        plugin = h.add(caller([
            {"op": "metric.add", "name": "cache_hits", "labels": {"tier": "l1"}},
            {"op": "metric.add", "name": "cache_hits", "value": 2, "labels": {"tier": "l1"}},
            {"op": "metric.add", "name": "cache_hits", "labels": {"tier": "l2"}},
            {"op": "metric.set", "name": "queue_depth", "value": 7},
            {"op": "metric.add", "name": "queue_depth", "value": -2},
            {"op": "metric.observe", "name": "latency_ms", "value": 5},
            {"op": "metric.observe", "name": "latency_ms", "value": 50}]),
            plugin_id="cache-plug")
        assert plugin.call("test").value is None
        got = families(h)
        hits = {s.labels["tier"]: s.value for s in got["wasmext_plugin_cache_plug__cache_hits"]
                .samples if s.name.endswith("_total")}
        assert hits == {"l1": 3.0, "l2": 1.0}
        assert got["wasmext_plugin_cache_plug__cache_hits"].documentation == "Cache hits"
        depth = got["wasmext_plugin_cache_plug__queue_depth"].samples
        assert [s.value for s in depth] == [5.0]
        hist = {(s.name, s.labels.get("le")): s.value
                for s in got["wasmext_plugin_cache_plug__latency_ms"].samples}
        assert hist[("wasmext_plugin_cache_plug__latency_ms_bucket", "10.0")] == 1.0
        assert hist[("wasmext_plugin_cache_plug__latency_ms_bucket", "+Inf")] == 2.0
        assert hist[("wasmext_plugin_cache_plug__latency_ms_sum", None)] == 55.0
        h.unload("cache-plug")  # its series leave the exposition with it
        assert not any(n.startswith("wasmext_plugin_cache_plug") for n in families(h))


@pytest.mark.parametrize(("request_", "code"), [
    ({"op": "metric.add", "name": "nope"}, "not_found"),
    ({"op": "metric.set", "name": "cache_hits", "value": 1, "labels": {"tier": "a"}},
     "invalid"),
    ({"op": "metric.add", "name": "cache_hits", "value": -1, "labels": {"tier": "a"}},
     "invalid"),
    ({"op": "metric.add", "name": "cache_hits"}, "invalid"),
    ({"op": "metric.add", "name": "cache_hits", "labels": {"tier": 5}}, "invalid"),
    ({"op": "metric.set", "name": "queue_depth", "value": float("nan")}, "invalid"),
    ({"op": "metric.observe", "name": "latency_ms", "value": "fast"}, "invalid"),
])
def test_bad_updates_answer_a_code_and_change_nothing(request_: dict[str, Any],
                                                      code: str) -> None:
    with host() as h:
        plugin = h.add(caller([request_]), plugin_id="bad")
        with pytest.raises(PluginError) as info:
            plugin.call("test")
        assert info.value.code == code
        assert not any(s.value for f in families(h).values() if f.name.startswith(
            "wasmext_plugin_bad") for s in f.samples if not s.name.endswith("_created"))


def test_a_minor_1_guest_has_neither_the_ops_nor_its_declarations() -> None:
    with host() as h:
        plugin = h.add(caller([{"op": "metric.add", "name": "queue_depth"}], minor=1),
                       plugin_id="old")
        with pytest.raises(PluginError) as info:
            plugin.call("test")
        assert info.value.code == "unsupported"
        assert not any(n.startswith("wasmext_plugin_old") for n in families(h))


def test_bad_declarations_are_refused_by_name_and_the_good_ones_kept() -> None:
    with host() as h:
        h.add(caller([{"op": "metric.set", "name": "ok", "value": 1}], metrics=[
            {"name": "ok", "kind": "gauge"},
            {"name": "Bad-Name\x1b[31m", "kind": "gauge"},
            {"name": "kindless", "kind": "summary"},
            {"name": "ok", "kind": "counter"},
            {"name": "le_hist", "kind": "histogram", "labels": ["le"]},
            {"name": "down", "kind": "histogram", "buckets": [5, 1]},
            {"name": "ok2", "kind": "counter", "buckets": [1]},
        ]), plugin_id="decl").call("test")
        refused = [e for e in h.load_errors if isinstance(e, MetricRefused)]
        assert len(refused) == 6
        assert all(e.plugin_id == "decl" and "\x1b" not in e.describe() for e in refused)
        assert families(h)["wasmext_plugin_decl__ok"].samples[0].value == 1.0


def _flood_guest(registration: dict[str, Any]) -> bytes:
    """A guest whose registration map is too large for guest_wat's fixed layout."""
    reg = msgpack.packb(registration)
    resp = msgpack.packb({"ok": True, "value": "ok"})
    pages = len(reg) // 65536 + 3
    return bytes(wasmtime.wat2wasm(f"""(module
  (memory (export "memory") {pages})
  (global $heap (mut i32) (i32.const {65536 * (pages - 1)}))
  (data (i32.const 1024) "{wat_bytes(resp)}")
  (data (i32.const 65536) "{wat_bytes(reg)}")
  (func (export "wasmext_abi_version") (result i32) (i32.const 1))
  (func (export "wasmext_alloc") (param $n i32) (result i32)
    (local $p i32) (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $n))) (local.get $p))
  (func (export "wasmext_register") (param i32 i32) (result i64)
    (i64.const {packed(65536, len(reg))}))
  (func (export "wasmext_call") (param i32 i32) (result i64)
    (i64.const {packed(1024, len(resp))})))"""))


def test_eight_thousand_declared_metrics_are_capped_with_metric_limit() -> None:
    policy = MetricPolicy()
    # 8,000 (7 values each): under the registration's MAX_REGISTRATION_VALUES, so the
    # metric cap is what refuses the rest, not the registration's size.
    flood = [{"name": f"m{i}", "kind": "gauge", "help": "x" * 50} for i in range(8_000)]
    wide = [{"name": "wide", "kind": "counter", "labels": [f"l{i}" for i in range(10_000)]}]
    with host() as h:
        started = time.monotonic()
        h.add(_flood_guest({"hooks": [{"hook": "test"}], "abi_minor": 2, "metrics": flood}),
              plugin_id="flood")
        h.add(_flood_guest({"hooks": [{"hook": "test"}], "abi_minor": 2, "metrics": wide}),
              plugin_id="wide")
        assert time.monotonic() - started < 10
        limits = [e for e in h.load_errors if isinstance(e, MetricLimit)]
        assert {e.plugin_id for e in limits} == {"flood", "wide"}
        assert any("8000 metrics declared" in e.message for e in limits)
        assert any("10000 labels" in e.message for e in limits)
        exported = [n for n in families(h) if n.startswith("wasmext_plugin_flood__")]
        assert len(exported) == policy.max_metrics
        assert not any(n.startswith("wasmext_plugin_wide") for n in families(h))
        assert h.plugins["flood"].plugin.call("test").value == "ok"
        still_serving(h)


def test_a_label_value_flood_stops_at_the_series_cap() -> None:
    """150 distinct label values from one hook call: the 101st answers `limit`."""
    req = msgpack.packb({"op": "metric.add", "name": "cache_hits",
                         "labels": {"tier": "vAA"}})
    at = DATA_AT + req.index(b"vAA") + 1  # the two letters the loop rewrites
    body = f"""(local $i i32) (local $last i64)
      (loop $more
        (i32.store8 (i32.const {at}) (i32.add (i32.const 65)
                                               (i32.rem_u (local.get $i) (i32.const 26))))
        (i32.store8 (i32.const {at + 1}) (i32.add (i32.const 65)
                                                   (i32.div_u (local.get $i) (i32.const 26))))
        (local.set $last (call $host_call (i32.const {DATA_AT}) (i32.const {len(req)})))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $more (i32.lt_u (local.get $i) (i32.const 150))))
      (local.get $last)"""
    wasm = bytes(wasmtime.wat2wasm(guest_wat(body, imports=HOST_CALL, data=req, registration={
        "hooks": [{"hook": "test"}], "abi_minor": 2, "metrics": DECLARED})))
    with host() as h:
        plugin = h.add(wasm, plugin_id="labels")
        started = time.monotonic()
        with pytest.raises(PluginError) as info:
            plugin.call("test")
        assert time.monotonic() - started < 3
        assert info.value.code == "limit" and "label-value combinations" in info.value.message
        series = [s for s in families(h)["wasmext_plugin_labels__cache_hits"].samples
                  if s.name.endswith("_total")]
        assert len(series) == MetricPolicy().max_series_per_metric
        # A series it already has still counts.
        again = h.add(caller([{"op": "metric.add", "name": "queue_depth"}]),
                      plugin_id="labels-2")
        assert again.call("test").value is None
        still_serving(h)
