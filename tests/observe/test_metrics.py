"""Metrics (Prometheus names over a real loopback endpoint, percentiles) and JSON logs."""

from __future__ import annotations

import io
import json
import logging
import random
import urllib.request
from collections.abc import Iterator

import pytest

from support import run_in_threads
from wasmext.errors import (
    CapabilityDenied,
    OutOfFuel,
    PluginError,
    Quarantined,
    Timeout,
    WasmextError,
)
from wasmext.observe.events import EventBus
from wasmext.observe.logs import JsonFormatter, RedactingFilter, SecretRegistry, json_handler
from wasmext.observe.metrics import (
    METRICS,
    PROMETHEUS_NAMES,
    Metrics,
    outcome_of,
    percentile,
    prometheus_name,
)


def exercise(m: Metrics, plugin_id: str = "pii-mask") -> None:
    m.record_registration("register", plugin_id)
    m.record_callback(plugin_id, "on_plain_text", "ok", 0.004, fuel=1200)
    m.record_state_op(plugin_id, "set")
    m.set_state_size(plugin_id, 2048)
    m.record_eviction(plugin_id, 2, key="k1")
    m.record_host_call(plugin_id, "state.get")
    m.record_event(plugin_id, "emitted")
    m.record_event_dropped(plugin_id)
    m.record_llm(plugin_id, 12, 5, 0.25)


def test_prometheus_names() -> None:
    assert PROMETHEUS_NAMES["extension.registration.total"] == "extension_registration_total"
    assert PROMETHEUS_NAMES["extension.callback.total"] == "extension_callback_total"
    assert PROMETHEUS_NAMES["extension.callback.duration_ms"] == "extension_callback_duration_ms"
    assert PROMETHEUS_NAMES["extension.state.operations"] == "extension_state_operations_total"
    assert PROMETHEUS_NAMES["extension.state.evictions"] == "extension_state_evictions_total"
    assert PROMETHEUS_NAMES["extension.state.size_bytes"] == "extension_state_size_bytes"
    assert PROMETHEUS_NAMES["extension.events.dropped"] == "extension_events_dropped_total"
    assert prometheus_name("x.y") == "x_y"


def test_every_metric_is_served_on_loopback() -> None:
    m = Metrics()
    exercise(m)
    with m.serve(port=0) as server:
        assert server.host == "127.0.0.1"
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(server.url, timeout=10) as reply:
            assert reply.status == 200
            text = reply.read().decode()
    for dotted, (kind, labels, _doc) in METRICS.items():
        name = PROMETHEUS_NAMES[dotted]
        sample = f"{name}_bucket" if kind == "histogram" else name
        lines = [ln for ln in text.splitlines() if ln.startswith(sample + "{")]
        assert lines, f"{dotted} ({sample}) missing from the exposition"
        assert all(f'{label}="' in lines[0] for label in labels)
    assert ('extension_callback_total{callback_type="on_plain_text",extension_id="pii-mask",'
            'outcome="ok"} 1.0') in text
    assert 'extension_fuel_consumed_total{extension_id="pii-mask"} 1200.0' in text
    assert 'extension_state_evictions_total{extension_id="pii-mask"} 2.0' in text
    assert 'extension_state_current_bytes{extension_id="pii-mask"} 2048.0' in text


def test_instances_do_not_share_series() -> None:
    a, b = Metrics(), Metrics()
    exercise(a)
    labels = {"callback_type": "on_plain_text", "extension_id": "pii-mask", "outcome": "ok"}
    assert a.registry.get_sample_value("extension_callback_total", labels) == 1.0
    assert b.registry.get_sample_value("extension_callback_total", labels) is None
    assert b.snapshot() == {}
    assert b"extension_callback_total{" not in b.exposition()


def test_callback_histogram_is_in_milliseconds() -> None:
    m = Metrics()
    m.record_callback("p", "on_tag", "ok", 0.0025)
    labels = {"callback_type": "on_tag", "extension_id": "p"}
    assert m.registry.get_sample_value("extension_callback_duration_ms_sum", labels) \
        == pytest.approx(2.5)
    assert m.registry.get_sample_value("extension_callback_duration_ms_bucket",
                                       {**labels, "le": "2.5"}) == 1.0
    assert m.registry.get_sample_value("extension_callback_duration_ms_bucket",
                                       {**labels, "le": "1.0"}) == 0.0


@pytest.mark.parametrize(("exc", "outcome"), [
    (None, "ok"),
    (OutOfFuel("x"), "fault"),
    (Timeout("x"), "fault"),
    (PluginError("x", code="failed"), "error"),
    (Quarantined("x"), "skipped"),
    (CapabilityDenied("x"), "denied"),
    (WasmextError("x"), "internal"),
    (ValueError("x"), "internal"),
])
def test_outcome_of(exc: BaseException | None, outcome: str) -> None:
    assert outcome_of(exc) == outcome


def test_time_callback_records_outcome_and_fuel() -> None:
    m = Metrics()
    with m.time_callback("p", "on_plain_text") as call:
        call.fuel = 500

    def out_of_fuel() -> None:
        with m.time_callback("p", "on_plain_text") as call:
            call.fuel = 1000
            raise OutOfFuel("used all fuel")

    with pytest.raises(OutOfFuel):
        out_of_fuel()
    stats = m.snapshot()["p"]
    assert (stats["calls"], stats["faults"], stats["fuel"]) == (2, 1, 1500)
    fault = {"callback_type": "on_plain_text", "extension_id": "p", "outcome": "fault"}
    assert m.registry.get_sample_value("extension_callback_total", fault) == 1.0


def test_snapshot_percentiles_match_a_simple_model() -> None:
    m = Metrics()
    durations_ms = list(range(1, 101))
    random.Random(7).shuffle(durations_ms)
    for ms in durations_ms:
        m.record_callback("p", "on_plain_text", "ok", ms / 1000.0, fuel=10)
    m.record_host_call("p", "log")
    m.set_state_size("p", 300)
    assert m.snapshot() == {"p": {"calls": 100, "p50_ms": pytest.approx(50.0),
                                  "p99_ms": pytest.approx(99.0), "fuel": 1000, "faults": 0,
                                  "state_bytes": 300, "host_calls": 1, "llm_tokens": 0,
                                  "llm_cost": 0.0}}


def test_reservoir_is_bounded_and_still_representative() -> None:
    m = Metrics(reservoir_size=500, seed=3)
    rng = random.Random(11)
    values = [rng.uniform(0.0, 1000.0) for _ in range(20_000)]
    for ms in values:
        m.record_callback("p", "h", "ok", ms / 1000.0)
    assert len(m._plugins["p"].reservoir) == 500
    stats = m.snapshot()["p"]
    model_p50, model_p99 = percentile(values, 50), percentile(values, 99)
    assert model_p50 is not None and model_p99 is not None
    assert stats["calls"] == 20_000
    assert stats["p50_ms"] == pytest.approx(model_p50, abs=100.0)
    assert stats["p99_ms"] == pytest.approx(model_p99, abs=30.0)


@pytest.mark.parametrize("seed", [0, 3, 12345])
def test_the_reservoir_is_a_uniform_sample_of_every_call(seed: int) -> None:
    """Each call has the same chance to be in the reservoir however early or late it
    came (algorithm L draws the calls it keeps ahead; the rest cost a comparison)."""
    m = Metrics(reservoir_size=400, seed=seed)
    n = 40_000
    for i in range(n):  # the i-th call lasts i ms: the reservoir tells which calls it kept
        m.record_callback("p", "h", "ok", i / 1000.0)
    kept = sorted(m._plugins["p"].reservoir)
    assert len(kept) == 400 and len(set(kept)) == 400  # no call kept twice
    quarters = [sum(1 for k in kept if q * n / 4 <= k < (q + 1) * n / 4) for q in range(4)]
    assert all(60 <= c <= 140 for c in quarters), quarters  # 100 each, expected
    assert kept[-1] > n - 1000 and kept[0] < 1000  # the latest and earliest calls too
    m.record_callback("q", "h", "ok", 0.001)
    assert list(m._plugins["q"].reservoir) == [1.0]
    none = Metrics(reservoir_size=0)
    for _ in range(10):
        none.record_callback("p", "h", "ok", 0.001)
    assert len(none._plugins["p"].reservoir) == 0 and none.snapshot()["p"]["calls"] == 10


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 100) == 4.0
    assert percentile([4.0, 1.0, 3.0, 2.0], 0) == 1.0


def test_guest_controlled_labels_are_capped() -> None:
    m = Metrics(max_label_values=3)
    for i in range(50):
        m.record_host_call("p", f"x.op{i}")
    ops = {s.labels["op"] for metric in m.registry.collect()
           if metric.name == "extension_host_calls" for s in metric.samples
           if s.name.endswith("_total")}
    assert ops == {"x.op0", "x.op1", "x.op2", "other"}
    assert m.snapshot()["p"]["host_calls"] == 50


def test_event_bus_counts_become_metrics() -> None:
    m = Metrics()
    bus = EventBus(observer=m.record_event, may_emit=lambda pid, t: True, rate=0.0, burst=1)
    try:
        bus.subscribe("plugin.a.*", lambda e: None)
        bus.emit_from("a", "plugin.a.x")
        with pytest.raises(WasmextError):
            bus.emit_from("a", "plugin.a.x")
        assert bus.flush(10.0)
    finally:
        bus.close(10.0)

    def value(who: str, outcome: str) -> float | None:
        return m.registry.get_sample_value("extension_events_total",
                                           {"extension_id": who, "outcome": outcome})

    assert value("a", "emitted") == 1.0
    assert value("a", "rate_limited") == 1.0
    assert value("_app", "delivered") == 1.0


# -- logs ----------------------------------------------------------------------------


@pytest.fixture
def json_log() -> Iterator[tuple[logging.Logger, io.StringIO, SecretRegistry]]:
    stream = io.StringIO()
    secrets = SecretRegistry(["hunter2"])
    handler = json_handler(stream, secrets)
    parent = logging.getLogger("wasmext.test-json")
    parent.addHandler(handler)
    parent.setLevel(logging.DEBUG)
    parent.propagate = False
    yield logging.getLogger("wasmext.test-json.child"), stream, secrets
    parent.removeHandler(handler)
    parent.propagate = True


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    text = stream.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_json_lines_carry_the_context_fields(
        json_log: tuple[logging.Logger, io.StringIO, SecretRegistry]) -> None:
    log, stream, _secrets = json_log
    log.info("hook %s took %d ms\nsecond line \u2028", "on_tag", 3,
             extra={"plugin_id": "pii-mask", "session": "s1", "hook": "on_tag",
                    "outcome": "ok", "duration_ms": 3.5, "level": "not overriding"})
    log.warning("no context")
    first, second = lines(stream)
    assert first["msg"] == "hook on_tag took 3 ms\nsecond line \u2028"
    assert (first["plugin_id"], first["session"], first["hook"], first["outcome"]) \
        == ("pii-mask", "s1", "on_tag", "ok")
    assert first["duration_ms"] == 3.5 and first["level"] == "info"
    assert first["logger"] == "wasmext.test-json.child"
    assert str(first["ts"]).endswith("Z")
    assert second["plugin_id"] is None and second["outcome"] is None
    assert second["level"] == "warning"


def test_secrets_are_redacted_everywhere(
        json_log: tuple[logging.Logger, io.StringIO, SecretRegistry]) -> None:
    log, stream, secrets = json_log
    secrets.add("s3cr3t-token")
    try:
        raise ValueError("bad token s3cr3t-token")
    except ValueError:
        log.exception("login with %s failed", "hunter2",
                      extra={"plugin_id": "p", "detail": {"headers": ["Bearer hunter2"]},
                             "obj": ValueError("hunter2")})
    text = stream.getvalue()
    assert "hunter2" not in text and "s3cr3t-token" not in text
    (record,) = lines(stream)
    assert record["msg"] == "login with *** failed"
    assert record["detail"] == {"headers": ["Bearer ***"]}
    assert "ValueError: bad token ***" in str(record["exc"])
    assert record["obj"] == "ValueError('***')"
    secrets.discard("hunter2")
    log.info("hunter2 is fine now")
    assert lines(stream)[-1]["msg"] == "hunter2 is fine now"


def test_redaction_prefers_the_longest_secret() -> None:
    f = RedactingFilter(["abc", "abcdef", ""])
    assert f.redact("xx abcdef abc") == "xx *** ***"
    assert RedactingFilter(lambda: []).redact("abc") == "abc"


def test_formatter_on_a_plain_record() -> None:
    record = logging.LogRecord("n", logging.ERROR, __file__, 1, "x=%r", ({"a": 1},), None)
    doc = json.loads(JsonFormatter(extras=False).format(record))
    assert doc["msg"] == "x={'a': 1}" and doc["level"] == "error"
    assert set(doc) == {"ts", "level", "logger", "msg", "plugin_id", "session", "hook",
                        "outcome"}


def test_llm_counters_keep_counting_after_the_plugin_is_forgotten() -> None:
    m = Metrics()
    m.record_llm("asker", 12, 5, 0.25)
    m.record_llm("asker", 3, 1, 0.5)
    assert m.snapshot()["asker"]["llm_tokens"] == 21
    assert m.snapshot()["asker"]["llm_cost"] == pytest.approx(0.75)
    m.forget("asker")
    assert "asker" not in m.snapshot()
    m.record_llm("asker", 1, 1, 0.125)  # a new summary, the same Prometheus counters
    assert m.snapshot()["asker"]["llm_tokens"] == 2
    text = m.exposition().decode()
    tokens = prometheus_name("extension.llm.tokens")
    lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
             if line.startswith(tokens) and 'extension_id="asker"' in line}
    assert sorted(lines.values()) == [7.0, 16.0]  # output 5+1+1, input 12+3+1


def test_host_calls_counted_from_many_threads_without_a_lock_lose_none() -> None:
    """`record_host_call` ticks counters without the metrics lock (issue 25): eight
    threads counting at once, with a short switch interval so the GIL changes hands
    mid-count, still add up exactly, in the summary and in the Prometheus series."""
    m = Metrics()
    per_thread, threads = 20_000, 8

    def count(n: int) -> None:
        for _ in range(per_thread):
            m.record_host_call("p", "config.get")
            m.record_host_call(f"q{n % 2}", "log")

    assert run_in_threads(count, threads, switch_interval=1e-6) == []
    snap = m.snapshot()
    assert snap["p"]["host_calls"] == per_thread * threads
    assert snap["q0"]["host_calls"] == snap["q1"]["host_calls"] == per_thread * threads // 2
    series = {(s.labels["extension_id"], s.labels["op"]): s.value
              for metric in m.registry.collect() if metric.name == "extension_host_calls"
              for s in metric.samples if s.name.endswith("_total")}
    assert series == {("p", "config.get"): per_thread * threads,
                      ("q0", "log"): per_thread * threads // 2,
                      ("q1", "log"): per_thread * threads // 2}


def test_a_forgotten_plugin_keeps_its_host_call_series_and_restarts_its_summary() -> None:
    m = Metrics()
    for _ in range(3):
        m.record_host_call("p", "log")
    m.forget("p")
    m.record_host_call("p", "log")
    assert m.snapshot()["p"]["host_calls"] == 1
    series = [s.value for metric in m.registry.collect()
              if metric.name == "extension_host_calls" for s in metric.samples
              if s.name.endswith("_total")]
    assert series == [4.0]


def test_what_is_counted_before_the_first_scrape_is_in_it() -> None:
    """The series are made on first use; what was counted before is in the first scrape,
    the same text as when the registry existed from the start."""
    def counts(m: Metrics) -> None:
        for action in ("register", "unregister", "register", "bogus"):
            m.record_registration(action, "pii-mask")
        m.record_state_op("pii-mask", "set")
        m.record_eviction("pii-mask", 3, key="k")
        m.record_event("pii-mask", "emitted")
        m.record_event("pii-mask", "emitted")
        m.record_event_dropped("listener")
        m.record_callback("pii-mask", "on_plain_text", "ok", 0.002, fuel=10)
        m.record_host_call("pii-mask", "state.get")

    late, early = Metrics(), Metrics()
    assert early.registry is not None  # made before anything is counted
    counts(late)
    counts(early)
    def series(m: Metrics) -> list[str]:  # a `_created` sample is the moment it was made
        return [line for line in m.exposition().decode().splitlines()
                if "_created{" not in line]

    assert series(late) == series(early)
    text = "\n".join(series(late))
    assert 'extension_registration_total{action="register",extension_id="pii-mask"} 2.0' in text
    assert 'extension_registration_total{action="other",extension_id="pii-mask"} 1.0' in text
    assert 'extension_events_total{extension_id="pii-mask",outcome="emitted"} 2.0' in text
    assert 'extension_state_evictions_total{extension_id="pii-mask"} 3.0' in text
