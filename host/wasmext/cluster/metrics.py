"""Prometheus metrics per remote extension, read from a `RemoteCaller`'s stats.

    extension_remote_calls_total{extension,outcome}   ok | failed | short_circuited
    extension_remote_timeouts_total{extension}
    extension_remote_retries_total{extension}
    extension_remote_latency_ms{extension,quantile}   p50, p99 of recent answers
    extension_remote_breaker_state{extension}         0 closed, 1 half open, 2 open

`RemoteMetrics(caller).register(host.observe.metrics.registry)` puts them beside the
host's own metrics (served by `--metrics-port`). A worker registers its own:

    extension_worker_requests_total{worker,extension,subject,outcome}
        answered | failed | expired (dropped unrun: the caller's deadline had passed)
        | duplicate (ran; its state commit had been applied under the same call id)
    extension_worker_loop_calls_total{worker,extension,subject}
        stage calls run on the worker's event loop (the rest went through its lane)
    extension_worker_demoted_total{worker,extension,subject}
        calls that held the loop past the worker's `short_call_ms`: each sent the
        plugin's calls off the loop for a back-off
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from wasmext.cluster.remote import RemoteCaller

__all__ = ["BREAKER_STATES", "RemoteMetrics", "WorkerMetrics"]

BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}


class RemoteMetrics(Collector):
    """The caller's figures per remote extension."""

    def __init__(self, caller: RemoteCaller) -> None:
        self.caller = caller

    def register(self, registry: CollectorRegistry) -> RemoteMetrics:
        """Register with the registry; returns self."""
        registry.register(self)
        return self

    def collect(self) -> Iterator[Metric]:
        """The metric families, read from the caller's stats at scrape time."""
        calls = CounterMetricFamily("extension_remote_calls", "Remote extension calls",
                                    labels=["extension", "outcome"])
        timeouts = CounterMetricFamily("extension_remote_timeouts",
                                       "Remote extension attempts that timed out",
                                       labels=["extension"])
        retries = CounterMetricFamily("extension_remote_retries",
                                      "Remote extension attempts after the first",
                                      labels=["extension"])
        latency = GaugeMetricFamily("extension_remote_latency_ms",
                                    "Remote extension answer latency (recent answers)",
                                    labels=["extension", "quantile"])
        breaker = GaugeMetricFamily("extension_remote_breaker_state",
                                    "Circuit breaker: 0 closed, 1 half open, 2 open",
                                    labels=["extension"])
        for ext_id, stats in sorted(self.caller.stats.items()):
            calls.add_metric([ext_id, "ok"], stats.ok)
            calls.add_metric([ext_id, "failed"], stats.failed - stats.short_circuited)
            calls.add_metric([ext_id, "short_circuited"], stats.short_circuited)
            timeouts.add_metric([ext_id], stats.timeouts)
            retries.add_metric([ext_id], stats.retries)
            for q in (0.5, 0.99):
                value = stats.quantile(q)
                if value is not None:
                    latency.add_metric([ext_id, str(q)], value)
            breaker.add_metric([ext_id], BREAKER_STATES[self.caller.breakers[ext_id].state])
        yield from (calls, timeouts, retries, latency, breaker)


Figures = Callable[[], Mapping[str, tuple[str, Any]]]
_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, WorkerMetrics] = \
    weakref.WeakKeyDictionary()  # one collector per registry, however many workers
_LOCK = threading.Lock()


class WorkerMetrics(Collector):
    """The figures per endpoint of every worker serving one host's registry: each
    source maps a subject to (plugin id, counts with `answered`, `failed`, `expired`
    and `duplicate`)."""

    def __init__(self) -> None:
        self._sources: dict[str, Figures] = {}  # by worker name

    @classmethod
    def add(cls, registry: CollectorRegistry, worker: str, figures: Figures) -> None:
        """Count `worker`'s figures in `registry` (one collector per registry)."""
        with _LOCK:
            metrics = _BY_REGISTRY.get(registry)
            if metrics is None:
                metrics = _BY_REGISTRY[registry] = cls()
                registry.register(metrics)
            metrics._sources[worker] = figures

    def collect(self) -> Iterator[Metric]:
        """The metrics now."""
        requests = CounterMetricFamily("extension_worker_requests",
                                       "Requests a worker took, by outcome",
                                       labels=["worker", "extension", "subject", "outcome"])
        on_loop = CounterMetricFamily("extension_worker_loop_calls",
                                      "Stage calls a worker ran on its event loop",
                                      labels=["worker", "extension", "subject"])
        demoted = CounterMetricFamily("extension_worker_demoted",
                                      "Calls that held a worker's loop past a short call "
                                      "(their plugin then ran off the loop)",
                                      labels=["worker", "extension", "subject"])
        for worker, figures in sorted(self._sources.items()):
            for subject, (ext_id, c) in sorted(figures().items()):
                for outcome in ("answered", "failed", "expired", "duplicate"):
                    requests.add_metric([worker, ext_id, subject, outcome],
                                        getattr(c, outcome))
                on_loop.add_metric([worker, ext_id, subject], c.on_loop)
                demoted.add_metric([worker, ext_id, subject], c.demoted)
        yield from (requests, on_loop, demoted)
