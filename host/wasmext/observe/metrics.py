"""Plugin metrics: Prometheus series, a per-plugin summary, an optional /metrics endpoint.

    metrics = Metrics()
    with metrics.time_callback("pii-mask", "on_plain_text") as call:
        ...                               # an exception sets the outcome (outcome_of)
        call.fuel = fuel_used
    metrics.snapshot()["pii-mask"]        # {"calls", "p50_ms", "p99_ms", "fuel", ...}
    server = metrics.serve(9464)          # http://127.0.0.1:9464/metrics

Each `Metrics` has its own CollectorRegistry, so instances (and tests) never share
series. The registry and its series are made (and prometheus_client imported) on
first use: a scrape, `serve`, or the first state, event or model count; hook and host
calls are plain integers until then (`observe.callstats`). Names in METRICS are the
spec's dotted names; the Prometheus name replaces dots by underscores, and a
counter's samples end in `_total` (PROMETHEUS_NAMES).
Label values a guest can influence (hook, op, outcome) are capped per plugin: past
`max_label_values` distinct values, new ones are counted as "other".
"""

from __future__ import annotations

import array
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from wasmext.errors import CapabilityDenied, PluginError, PluginFault, Quarantined
from wasmext.observe.callstats import CallCell, CallStats, Tally

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "METRICS", "PROMETHEUS_NAMES", "CallbackTimer", "Metrics", "MetricsServer", "PluginStats",
    "outcome_of", "percentile", "prometheus_name",
]

log = logging.getLogger("wasmext.observe.metrics")

# dotted name: (kind, labels, help)
METRICS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "extension.registration.total": ("counter", ("action", "extension_id"),
                                     "Plugins registered and unregistered"),
    "extension.callback.duration_ms": ("histogram", ("callback_type", "extension_id"),
                                       "Hook call duration in milliseconds"),
    "extension.callback.total": ("counter", ("callback_type", "extension_id", "outcome"),
                                 "Hook calls by outcome"),
    "extension.state.operations": ("counter", ("operation", "extension_id"),
                                   "State operations completed"),
    "extension.state.size_bytes": ("histogram", ("extension_id",),
                                   "Plugin state size observed after state operations"),
    "extension.state.current_bytes": ("gauge", ("extension_id",),
                                      "Plugin state size now"),
    "extension.state.evictions": ("counter", ("extension_id",), "State keys evicted (LRU)"),
    "extension.fuel.consumed": ("counter", ("extension_id",), "WebAssembly fuel consumed"),
    "extension.host_calls.total": ("counter", ("extension_id", "op"), "Host calls by op"),
    "extension.events.total": ("counter", ("extension_id", "outcome"),
                               "Event bus outcomes (emitted, delivered, dropped, ...)"),
    "extension.events.dropped": ("counter", ("subscriber",),
                                 "Events dropped because the subscriber's queue was full"),
    "extension.llm.tokens": ("counter", ("extension_id", "kind"),
                             "Model tokens used through llm.complete (kind: input, output)"),
    "extension.llm.cost": ("counter", ("extension_id",),
                           "Model cost of llm.complete, from the host's price table"),
}
DURATION_BUCKETS_MS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0,
                       50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)
SIZE_BUCKETS_BYTES = tuple(float(1024 * 4 ** i) for i in range(11))  # 1 KiB .. 1 GiB
FAULT_OUTCOMES = frozenset({"fault"})
OTHER = "other"
_PROMETHEUS_ATTRS = frozenset({
    "registry", "registrations", "state_operations", "state_size", "state_current",
    "state_evictions", "events", "events_dropped", "llm_tokens", "llm_cost"})


def prometheus_name(dotted: str) -> str:
    """The exposed name: dots become underscores; a counter's samples end in `_total`."""
    name = dotted.replace(".", "_")
    if METRICS.get(dotted, ("",))[0] == "counter" and not name.endswith("_total"):
        name += "_total"
    return name


PROMETHEUS_NAMES = {dotted: prometheus_name(dotted) for dotted in METRICS}


def outcome_of(exc: BaseException | None) -> str:
    """The `outcome` label of a hook call that raised `exc` (None: it returned)."""
    if exc is None:
        return "ok"
    if isinstance(exc, PluginFault):
        return "fault"
    if isinstance(exc, Quarantined):
        return "skipped"
    if isinstance(exc, CapabilityDenied):
        return "denied"
    return "error" if isinstance(exc, PluginError) else "internal"


def percentile(samples: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100) of `samples`; None when there are none."""
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


class PluginStats(TypedDict):
    """One plugin's figures in Metrics.snapshot()."""

    calls: int
    p50_ms: float | None
    p99_ms: float | None
    fuel: int
    faults: int
    state_bytes: int
    host_calls: int
    llm_tokens: int  # input + output tokens through llm.complete
    llm_cost: float


@dataclass
class _Plugin:
    # Doubles in one block (8 KiB when full) rather than a list of float objects
    # (32 KiB, spread over the heap): with a hundred plugins the lists' floats were
    # a good part of what every hook call's cache misses touched.
    reservoir: array.array[float] = field(default_factory=lambda: array.array("d"))
    calls: int = 0
    faults: int = 0
    fuel: int = 0
    state_bytes: int = 0
    host_calls: Tally = field(default_factory=Tally)  # ticked without the lock
    llm_tokens: int = 0
    llm_cost: float = 0.0
    # The call whose duration is kept next (`Metrics._sample`: every call until the
    # reservoir is full, then one drawn ahead), and algorithm L's running weight.
    sample_at: int = 0
    sample_w: float = 0.0


@dataclass
class CallbackTimer:
    """What `time_callback` yields: set `fuel` (and `outcome`, to override) before it ends."""

    fuel: int | None = None
    outcome: str | None = None


class MetricsServer:
    """The loopback /metrics endpoint; `close()` stops it."""

    def __init__(self, registry: CollectorRegistry, port: int, host: str) -> None:
        from prometheus_client.exposition import start_http_server

        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.host, self.port = host, int(self._server.server_port)

    @property
    def url(self) -> str:
        """The URL of the /metrics endpoint."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Shut the server down and wait for its thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Metrics:
    """Thread-safe; one per host. `reservoir_size` bounds the samples kept per plugin."""

    def __init__(self, *, reservoir_size: int = 1024, max_label_values: int = 64,
                 seed: int | None = 0) -> None:
        self.reservoir_size, self.max_label_values = reservoir_size, max_label_values
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._plugins: dict[str, _Plugin] = {}
        self._labels: dict[tuple[str, str], set[str]] = {}
        self._bound: dict[tuple[str, str, str], tuple[_Plugin, CallCell]] = {}
        # (plugin, op) -> the ticks of its summary and its counter series (`Tally`): a
        # host call takes no lock (a dict read and two ticks, each atomic).
        self._host_bound: dict[tuple[str, str], tuple[Callable[[], int], Callable[[], int]]] = {}
        # plugin -> its summary and its input, output and cost counter children.
        self._llm_bound: dict[str, tuple[_Plugin, Any, Any, Any]] = {}
        # Hook calls: counted in plain integers, exposed on scrape (observe.callstats).
        self._calls = CallStats(DURATION_BUCKETS_MS, {k: v[2] for k, v in METRICS.items()},
                                self._lock)
        self._prometheus_lock = threading.Lock()
        # (counter, labels) -> what was counted before the series existed (every load
        # records a registration and an event): added when they are made, so a scrape
        # sees it all.
        self._early: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    # The registry and the prometheus_client series: made by `_prometheus` on the
    # first read of any of them (`__getattr__`), then plain attributes.
    registry: CollectorRegistry
    registrations: Counter
    state_operations: Counter
    state_size: Histogram
    state_current: Gauge
    state_evictions: Counter
    events: Counter
    events_dropped: Counter
    llm_tokens: Counter
    llm_cost: Counter

    def __getattr__(self, name: str) -> Any:
        if name in _PROMETHEUS_ATTRS:
            self._prometheus()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _prometheus(self) -> None:
        with self._prometheus_lock:
            if "registry" in self.__dict__:
                return
            from prometheus_client import CollectorRegistry, Gauge

            registry = CollectorRegistry()
            registry.register(self._calls)
            self.registrations = self._counter(registry, "extension.registration.total")
            self.state_operations = self._counter(registry, "extension.state.operations")
            self.state_size = self._histogram(registry, "extension.state.size_bytes",
                                              SIZE_BUCKETS_BYTES)
            _kind, labels, doc = METRICS["extension.state.current_bytes"]
            self.state_current = Gauge("extension_state_current_bytes", doc, labels,
                                       registry=registry)
            self.state_evictions = self._counter(registry, "extension.state.evictions")
            self.events = self._counter(registry, "extension.events.total")
            self.events_dropped = self._counter(registry, "extension.events.dropped")
            self.llm_tokens = self._counter(registry, "extension.llm.tokens")
            self.llm_cost = self._counter(registry, "extension.llm.cost")
            for (series, early_labels), amount in self._early.items():
                getattr(self, series).labels(**dict(early_labels)).inc(amount)
            self._early.clear()
            self.registry = registry  # last: its presence says every series is made

    def _count(self, series: str, amount: float = 1, **labels: str) -> None:
        """Add to a labelled counter; before the series exist, to a plain number that
        `_prometheus` adds to it."""
        if "registry" not in self.__dict__:
            with self._prometheus_lock:
                if "registry" not in self.__dict__:
                    key = (series, tuple(labels.items()))
                    self._early[key] = self._early.get(key, 0) + amount
                    return
        getattr(self, series).labels(**labels).inc(amount)

    @staticmethod
    def _counter(registry: CollectorRegistry, dotted: str) -> Counter:
        from prometheus_client import Counter

        _kind, labels, doc = METRICS[dotted]
        return Counter(dotted.replace(".", "_"), doc, labels, registry=registry)

    @staticmethod
    def _histogram(registry: CollectorRegistry, dotted: str, buckets: tuple[float, ...]
                   ) -> Histogram:
        from prometheus_client import Histogram

        _kind, labels, doc = METRICS[dotted]
        return Histogram(dotted.replace(".", "_"), doc, labels, registry=registry,
                         buckets=buckets)

    def _label(self, kind: str, plugin_id: str, value: str) -> str:
        """Cap the distinct values of a guest-influenced label per plugin (lock held)."""
        seen = self._labels.setdefault((kind, plugin_id), set())
        if value in seen:
            return value
        if len(seen) >= self.max_label_values or len(value) > 128:
            return OTHER
        seen.add(value)
        return value

    def _plugin(self, plugin_id: str) -> _Plugin:
        stats = self._plugins.get(plugin_id)
        if stats is None:
            stats = self._plugins[plugin_id] = _Plugin()
        return stats

    # -- recording ---------------------------------------------------------------------

    def record_registration(self, action: str, plugin_id: str) -> None:
        """`action` is "register" or "unregister" (any other value counts as "other")."""
        with self._lock:
            self._plugin(plugin_id)
        label = action if action in ("register", "unregister") else OTHER
        self._count("registrations", action=label, extension_id=plugin_id)
        log.info("plugin %s: %s", plugin_id, action,
                 extra={"plugin_id": plugin_id, "outcome": action})

    def record_callback(self, plugin_id: str, hook: str, outcome: str, duration_s: float,
                        fuel: int | None = None) -> None:
        """One hook call: its duration in seconds and the fuel it consumed."""
        ms = duration_s * 1000.0 if duration_s > 0 else 0.0
        fuel = fuel if fuel is not None and fuel > 0 else 0
        with self._lock:
            bound = self._bound.get((plugin_id, hook, outcome))
            stats, cell = bound if bound is not None else \
                self._bind_callback(plugin_id, hook, outcome)
            stats.calls += 1
            if outcome in FAULT_OUTCOMES:
                stats.faults += 1
            stats.fuel += fuel
            if stats.calls >= stats.sample_at:  # a duration to keep (most calls: not)
                self._sample(stats, ms)
            self._calls.record(cell, ms, fuel)

    def _bind_callback(self, plugin_id: str, hook: str, outcome: str
                       ) -> tuple[_Plugin, CallCell]:
        """The summary and series of one (plugin, hook, outcome), bound once (lock held).

        Cells are kept only for values under the label cap, so the table stays
        bounded however many hook names or outcomes a plugin makes up.
        """
        hook_label = self._label("hook", plugin_id, hook)
        outcome_label = self._label("outcome", plugin_id, outcome)
        bound = (self._plugin(plugin_id), self._calls.cell(plugin_id, hook_label, outcome_label))
        if hook_label == hook and outcome_label == outcome:
            self._bound[(plugin_id, hook, outcome)] = bound
        return bound

    def _sample(self, stats: _Plugin, ms: float) -> None:
        """Reservoir sampling: a uniform sample of every call so far. Until the reservoir
        is full every call is kept; then Li's algorithm L draws how many calls to pass
        over before the next one replaces a random sample, so the calls in between cost
        one comparison (`record_callback`), not a random number each (algorithm R)."""
        reservoir, size = stats.reservoir, self.reservoir_size
        if size <= 0:  # no reservoir: nothing is ever kept
            stats.sample_at = 1 << 62
            return
        if len(reservoir) < size:
            reservoir.append(ms)
            if len(reservoir) < size:
                stats.sample_at = stats.calls + 1
                return
            stats.sample_w = self._weight(1.0)
        else:
            reservoir[int(self._rng.random() * size)] = ms
            stats.sample_w = self._weight(stats.sample_w)
        stats.sample_at = stats.calls + self._skip(stats.sample_w)

    def _weight(self, w: float) -> float:
        """Algorithm L's next weight: `w` times u^(1/k), u uniform in (0, 1]."""
        return w * math.exp(math.log(1.0 - self._rng.random()) / self.reservoir_size)

    def _skip(self, w: float) -> int:
        """How many calls on from this one the next kept one is (at least 1)."""
        if not 0.0 < w < 1.0:  # u was 1 (or the weight underflowed): keep the next
            return 1
        return int(math.log(1.0 - self._rng.random()) / math.log1p(-w)) + 1

    @contextmanager
    def time_callback(self, plugin_id: str, hook: str) -> Iterator[CallbackTimer]:
        """Time the block and record it; an exception gives the outcome, then propagates."""
        timer = CallbackTimer()
        start = time.perf_counter()
        try:
            yield timer
        except BaseException as exc:
            timer.outcome = timer.outcome or outcome_of(exc)
            raise
        finally:
            self.record_callback(plugin_id, hook, timer.outcome or "ok",
                                 time.perf_counter() - start, timer.fuel)

    def record_host_call(self, plugin_id: str, op: str) -> None:
        """One host call of `op` by the plugin (its summary and the labelled counter)."""
        bound = self._host_bound.get((plugin_id, op))
        if bound is None:
            with self._lock:
                label = self._label("op", plugin_id, op)
                bound = (self._plugin(plugin_id).host_calls.tick,
                         self._calls.host_call_count(plugin_id, label).tick)
                if label == op:  # bounded like the labels: made-up ops share "other"
                    self._host_bound[(plugin_id, op)] = bound
        bound[0]()
        bound[1]()

    def record_state_op(self, plugin_id: str, operation: str) -> None:
        """Count a state operation of the plugin."""
        with self._lock:
            self._plugin(plugin_id)
            operation = self._label("operation", plugin_id, operation)
        self._count("state_operations", operation=operation, extension_id=plugin_id)

    def set_state_size(self, plugin_id: str, size_bytes: int) -> None:
        """The plugin's state size after an operation: gauge, histogram and snapshot."""
        with self._lock:
            self._plugin(plugin_id).state_bytes = size_bytes
        self.state_current.labels(extension_id=plugin_id).set(size_bytes)
        self.state_size.labels(extension_id=plugin_id).observe(size_bytes)

    def record_eviction(self, plugin_id: str, count: int = 1, key: str | None = None) -> None:
        """Count state keys evicted from the plugin, and log it."""
        self._count("state_evictions", count, extension_id=plugin_id)
        log.info("plugin %s: %d state key(s) evicted, last %r", plugin_id, count, key,
                 extra={"plugin_id": plugin_id, "outcome": "evicted"})

    def record_event(self, subject: str, outcome: str) -> None:
        """The EventBus observer: `EventBus(observer=metrics.record_event)`."""
        self._count("events", extension_id=subject, outcome=outcome)

    def record_event_dropped(self, subscriber: str) -> None:
        """The EventBus drop observer: `EventBus(drop_observer=metrics.record_event_dropped)`;
        `subscriber` is the plugin id or the Python subscription's name."""
        self._count("events_dropped", subscriber=subscriber)

    def record_llm(self, plugin_id: str, input_tokens: int, output_tokens: int,
                   cost: float) -> None:
        """One llm.complete: the tokens the model reported and their price."""
        with self._lock:
            bound = self._llm_bound.get(plugin_id)
            if bound is None:
                bound = (self._plugin(plugin_id),
                         self.llm_tokens.labels(extension_id=plugin_id, kind="input"),
                         self.llm_tokens.labels(extension_id=plugin_id, kind="output"),
                         self.llm_cost.labels(extension_id=plugin_id))
                self._llm_bound[plugin_id] = bound
            stats = bound[0]
            stats.llm_tokens += max(0, input_tokens) + max(0, output_tokens)
            stats.llm_cost += max(0.0, cost)
        bound[1].inc(max(0, input_tokens))
        bound[2].inc(max(0, output_tokens))
        bound[3].inc(max(0.0, cost))

    def forget(self, plugin_id: str) -> None:
        """Drop a plugin's summary (its Prometheus counters stay, as counters should)."""
        with self._lock:
            self._plugins.pop(plugin_id, None)
            for key in [k for k in self._labels if k[1] == plugin_id]:
                del self._labels[key]
            for bound in [k for k in self._bound if k[0] == plugin_id]:
                del self._bound[bound]
            for pair in [k for k in self._host_bound if k[0] == plugin_id]:
                del self._host_bound[pair]
            self._llm_bound.pop(plugin_id, None)

    # -- reading -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, PluginStats]:
        """Per plugin: calls, p50/p99 duration (ms, from the reservoir), fuel, faults, ..."""
        with self._lock:
            items = [(pid, list(s.reservoir), PluginStats(
                calls=s.calls, p50_ms=None, p99_ms=None, fuel=s.fuel, faults=s.faults,
                state_bytes=s.state_bytes, host_calls=s.host_calls.value, llm_tokens=s.llm_tokens,
                llm_cost=s.llm_cost))
                for pid, s in self._plugins.items()]
        for _pid, samples, stats in items:
            stats["p50_ms"], stats["p99_ms"] = percentile(samples, 50), percentile(samples, 99)
        return {pid: stats for pid, _samples, stats in items}

    def exposition(self) -> bytes:
        """The Prometheus text exposition of this instance's registry."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def serve(self, port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
        """Serve /metrics over HTTP, on loopback unless told otherwise; port 0 picks one."""
        return MetricsServer(self.registry, port, host)

    serve_metrics = serve
