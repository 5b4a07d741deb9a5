"""Hook-call and host-call metrics counted in plain integers, turned into Prometheus
families on scrape.

Every hook call records its duration, its outcome and its fuel. Going through
prometheus_client's Histogram and Counter children costs several locks and a
Python loop over the buckets per call, more than a cheap hook call itself; here
a call adds to a few integers under the caller's lock (one `bisect` finds the
bucket), and `collect()` builds the same families (names, labels, cumulative
buckets, sums) when the registry is scraped. A host call (`record_host_call`)
ticks a `Tally`, which needs no lock at all: a labelled Counter child's `inc` took
its own lock and cost as much as a cheap op, and even the owner's lock (taken and
released around two additions) was a sixth of a `config.get` host call. Counters
never go down: a plugin that is forgotten keeps its series, as Prometheus counters
should.
"""

from __future__ import annotations

import itertools
import threading
from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # prometheus_client comes with the first scrape, not the host
    from prometheus_client.metrics_core import (
        CounterMetricFamily,
        HistogramMetricFamily,
        Metric,
    )

__all__ = ["CallCell", "CallStats", "Count", "Tally"]


def _le(bound: float) -> str:
    """A bucket bound as Prometheus writes it ("0.005", "1.0", "+Inf")."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


class _Histogram:
    __slots__ = ("buckets", "sum")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size  # per bucket, not cumulative; the last is +Inf
        self.sum = 0.0


class Count:
    """One counter series: a plain integer added to under the owner's lock."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class Tally:
    """A counter series added to without a lock, from any thread: `tick` is the `next`
    of an `itertools.count`, one step in C that the GIL never splits (`value += 1` is a
    load and a store another thread can come between, so a `Count` needs its owner's
    lock)."""

    __slots__ = ("_count", "tick")

    def __init__(self) -> None:
        self._count = itertools.count(1)
        self.tick = self._count.__next__

    @property
    def value(self) -> int:
        """The ticks so far (the count reads itself as `count(<next>)`)."""
        return int(repr(self._count)[6:-1]) - 1


class CallCell:
    """The series one (plugin, hook, outcome) adds to; bound once, then reused."""

    __slots__ = ("calls", "fuel", "histogram")

    def __init__(self, histogram: _Histogram, calls: Count, fuel: Count) -> None:
        self.histogram, self.calls, self.fuel = histogram, calls, fuel


class CallStats:
    """A Prometheus collector: duration histogram, call counter and fuel counter.

    Not locked itself: `record` runs under the owner's lock (`Metrics._lock`),
    and `collect` takes the same lock through `lock`.
    """

    def __init__(self, bounds: tuple[float, ...], docs: dict[str, str],
                 lock: threading.Lock) -> None:
        self.bounds = [*bounds, float("inf")]
        self.docs = docs
        self.lock = lock
        self._histograms: dict[tuple[str, str], _Histogram] = {}
        self._calls: dict[tuple[str, str, str], Count] = {}
        self._fuel: dict[str, Count] = {}
        self._host_calls: dict[tuple[str, str], Tally] = {}

    def cell(self, plugin_id: str, hook: str, outcome: str) -> CallCell:
        """The series for these (already capped) label values (owner's lock held)."""
        hist = self._histograms.get((hook, plugin_id))
        if hist is None:
            hist = self._histograms[(hook, plugin_id)] = _Histogram(len(self.bounds))
        calls = self._calls.get((hook, plugin_id, outcome))
        if calls is None:
            calls = self._calls[(hook, plugin_id, outcome)] = Count()
        fuel = self._fuel.get(plugin_id)
        if fuel is None:
            fuel = self._fuel[plugin_id] = Count()
        return CallCell(hist, calls, fuel)

    def host_call_count(self, plugin_id: str, op: str) -> Tally:
        """The host-call series of (plugin, op label) (owner's lock held)."""
        count = self._host_calls.get((plugin_id, op))
        if count is None:
            count = self._host_calls[(plugin_id, op)] = Tally()
        return count

    def record(self, cell: CallCell, ms: float, fuel: int) -> None:
        """One call (owner's lock held)."""
        hist = cell.histogram
        hist.buckets[bisect_left(self.bounds, ms)] += 1  # the first bound >= ms, as Prometheus
        hist.sum += ms
        cell.calls.value += 1
        if fuel > 0:
            cell.fuel.value += fuel

    def describe(self) -> Iterator[Metric]:
        """The metric families, without values."""
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        """The call duration histograms, call counts and fuel, per hook and plugin."""
        with self.lock:
            histograms = [(k, list(h.buckets), h.sum) for k, h in self._histograms.items()]
            calls = [(k, c.value) for k, c in self._calls.items()]
            fuel = [(k, c.value) for k, c in self._fuel.items() if c.value]
            host_calls = [(k, c.value) for k, c in self._host_calls.items()]
        duration, total, consumed, host = self._families()
        les = [_le(b) for b in self.bounds]
        for (hook, plugin_id), buckets, total_ms in histograms:
            running, cumulative = 0, []
            for le, n in zip(les, buckets, strict=True):
                running += n
                cumulative.append((le, float(running)))
            duration.add_metric([hook, plugin_id], cumulative, total_ms)
        for (hook, plugin_id, outcome), n in calls:
            total.add_metric([hook, plugin_id, outcome], float(n))
        for plugin_id, n in fuel:
            consumed.add_metric([plugin_id], float(n))
        for (plugin_id, op), n in host_calls:
            host.add_metric([plugin_id, op], float(n))
        return iter((duration, total, consumed, host))

    def _families(self) -> tuple[HistogramMetricFamily, CounterMetricFamily,
                                 CounterMetricFamily, CounterMetricFamily]:
        from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily

        return (HistogramMetricFamily("extension_callback_duration_ms",
                                      self.docs["extension.callback.duration_ms"],
                                      labels=["callback_type", "extension_id"]),
                CounterMetricFamily("extension_callback_total",
                                    self.docs["extension.callback.total"],
                                    labels=["callback_type", "extension_id", "outcome"]),
                CounterMetricFamily("extension_fuel_consumed",
                                    self.docs["extension.fuel.consumed"],
                                    labels=["extension_id"]),
                CounterMetricFamily("extension_host_calls",
                                    self.docs["extension.host_calls.total"],
                                    labels=["extension_id", "op"]))
