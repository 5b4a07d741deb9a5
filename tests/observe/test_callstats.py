"""The hook-call counters give the samples prometheus_client's own Histogram and Counter give."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram

from wasmext.observe.metrics import DURATION_BUCKETS_MS, Metrics

calls = st.lists(st.tuples(st.sampled_from(["p", "q"]), st.sampled_from(["on_a", "on_b"]),
                           st.sampled_from(["ok", "fault"]),
                           st.floats(min_value=0, max_value=20, allow_nan=False),
                           st.integers(min_value=0, max_value=10**6)), max_size=40)


def _samples(registry: CollectorRegistry) -> dict[tuple[str, Any], float]:
    out = {}
    for family in registry.collect():
        for s in family.samples:
            if not s.name.endswith("_created"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@given(calls)
@settings(max_examples=150, deadline=None)
def test_samples_match_prometheus_client(seq: list[tuple[str, str, str, float, int]]) -> None:
    ours = Metrics()
    ref = CollectorRegistry()
    hist = Histogram("extension_callback_duration_ms", "d", ["callback_type", "extension_id"],
                     registry=ref, buckets=DURATION_BUCKETS_MS)
    total = Counter("extension_callback_total", "t",
                    ["callback_type", "extension_id", "outcome"], registry=ref)
    fuel = Counter("extension_fuel_consumed", "f", ["extension_id"], registry=ref)
    for plugin, hook, outcome, seconds, used in seq:
        ours.record_callback(plugin, hook, outcome, seconds, used)
        hist.labels(callback_type=hook, extension_id=plugin).observe(seconds * 1000)
        total.labels(callback_type=hook, extension_id=plugin, outcome=outcome).inc()
        if used:
            fuel.labels(extension_id=plugin).inc(used)
    mine = {k: v for k, v in _samples(ours.registry).items()
            if k[0].startswith(("extension_callback", "extension_fuel"))}
    theirs = _samples(ref)
    assert mine.keys() == theirs.keys()
    for key, value in theirs.items():
        assert abs(mine[key] - value) <= 1e-6 * max(1.0, abs(value)), key


def test_capped_hook_names_share_the_other_series() -> None:
    m = Metrics(max_label_values=2)
    for i in range(5):
        m.record_callback("p", f"hook{i}", "ok", 0.001)
    labels = {"callback_type": "other", "extension_id": "p", "outcome": "ok"}
    assert m.registry.get_sample_value("extension_callback_total", labels) == 3.0
    assert len(m._bound) == 2  # only label values under the cap are bound
    assert b"extension_callback_total{" in m.exposition()
