"""Metrics a plugin declares in its registration map and updates with the `metric.*` ops.

    "metrics": [{"name": "cache_hits", "kind": "counter", "help": "...", "labels": ["tier"]},
                {"name": "queue_depth", "kind": "gauge"},
                {"name": "latency_ms", "kind": "histogram", "buckets": [1, 10, 100]}]

Each is exported in the host's Prometheus registry as `wasmext_plugin_<id>__<name>` (the
id's hyphens become underscores; a counter's samples end in `_total`). The double
underscore keeps the name one plugin's: ids never end in a hyphen and names never hold
`__`, so the last `__` splits every exported name back into its id and its name, and
plugin `a` cannot declare `b_hits` to pass for plugin `a-b`'s `hits`. Everything here
is the plugin's to choose, so everything is capped by the host's MetricPolicy: how many
metrics a plugin declares, how many labels and buckets each has, and how many label-value
combinations (series) a metric and a plugin may create. A declaration past a cap is
dropped with MetricLimit (the plugin keeps the ones before it); an update that would make
a series past a cap answers the `limit` error code and changes nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

from wasmext.errors import MetricLimit, MetricRefused, OpError, WasmextError
from wasmext.text import clean

__all__ = ["KINDS", "MetricPolicy", "PluginMetrics", "exported_name"]

KINDS = ("counter", "gauge", "histogram")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_LABEL_RE = re.compile(r"^[a-z][a-z0-9_]{0,30}$")


@dataclass(frozen=True)
class MetricPolicy:
    """The host's caps on what plugins declare and create."""

    max_metrics: int = 32           # declared per plugin
    max_labels: int = 4             # label names per metric
    max_buckets: int = 20           # histogram bucket bounds
    max_series_per_metric: int = 100  # label-value combinations per metric
    max_series_per_plugin: int = 500  # over all of a plugin's metrics
    max_help_chars: int = 200
    max_label_value_chars: int = 64


@dataclass
class _Declared:
    kind: str
    labels: tuple[str, ...]
    collector: Any
    series: set[tuple[str, ...]] = field(default_factory=set)


def exported_name(plugin_id: str, name: str) -> str:
    """The Prometheus name of a plugin's metric (without a counter's `_total`)."""
    return f"wasmext_plugin_{plugin_id.replace('-', '_')}__{name}"


def _shown(value: Any) -> str:
    return repr(clean(value, 64)) if isinstance(value, str) else type(value).__name__


def _declaration(item: Any, policy: MetricPolicy) -> tuple[str, str, str, tuple[str, ...],
                                                            tuple[float, ...] | None]:
    """(name, kind, help, labels, buckets) of one declaration, or MetricRefused."""
    if not isinstance(item, Mapping):
        raise MetricRefused("a metric declaration must be a map")
    name, kind = item.get("name"), item.get("kind")
    if not isinstance(name, str) or not _NAME_RE.match(name) or "__" in name:
        raise MetricRefused(f"metric name {_shown(name)}: lowercase letters, digits and "
                            "single underscores, 1-63, starting with a letter")
    if kind not in KINDS:
        raise MetricRefused(f"metric {name}: kind {_shown(kind)} is not one of "
                            f"{', '.join(KINDS)}")
    text = item.get("help", "")
    if not isinstance(text, str):
        raise MetricRefused(f"metric {name}: 'help' must be a string")
    labels = item.get("labels", [])
    if not isinstance(labels, list) or not all(isinstance(x, str) and _LABEL_RE.match(x)
                                               for x in labels):
        raise MetricRefused(f"metric {name}: 'labels' must be label names (lowercase "
                            "letters, digits and underscores, starting with a letter)")
    if len(labels) > policy.max_labels:
        raise MetricLimit(f"metric {name}: {len(labels)} labels; at most "
                          f"{policy.max_labels}")
    if len(set(labels)) != len(labels) or (kind == "histogram" and "le" in labels):
        raise MetricRefused(f"metric {name}: repeated or reserved label name")
    buckets = item.get("buckets")
    if buckets is not None:
        if kind != "histogram":
            raise MetricRefused(f"metric {name}: only a histogram has buckets")
        if not isinstance(buckets, list) or not buckets or not all(
                isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b)
                for b in buckets):
            raise MetricRefused(f"metric {name}: 'buckets' must be finite numbers")
        if len(buckets) > policy.max_buckets:
            raise MetricLimit(f"metric {name}: {len(buckets)} buckets; at most "
                              f"{policy.max_buckets}")
        if any(a >= b for a, b in itertools.pairwise(buckets)):
            raise MetricRefused(f"metric {name}: 'buckets' must increase")
    return (name, str(kind), clean(text, policy.max_help_chars), tuple(labels),
            tuple(float(b) for b in buckets) if buckets is not None else None)


class PluginMetrics:
    """Every loaded plugin's declared metrics, in one Prometheus registry."""

    def __init__(self, registry: CollectorRegistry | Callable[[], CollectorRegistry],
                 policy: MetricPolicy | None = None) -> None:
        # A function giving the registry: asked only when a plugin declares a metric, so
        # a host whose plugins declare none never imports prometheus_client.
        self._registry = registry
        self.policy = policy or MetricPolicy()
        self._plugins: dict[str, dict[str, _Declared]] = {}
        self._lock = threading.Lock()

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry the declared metrics are exported in."""
        if callable(self._registry):
            self._registry = self._registry()
        return self._registry

    def declare(self, plugin_id: str, declarations: Any) -> list[WasmextError]:
        """Declare a plugin's metrics (its registration map's "metrics"); what is refused
        comes back as errors naming it, the rest is exported."""
        self.forget(plugin_id)
        if not isinstance(declarations, list):
            return [MetricRefused("'metrics' must be an array of maps", plugin_id=plugin_id)]
        problems: list[WasmextError] = []
        mine: dict[str, _Declared] = {}
        if len(declarations) > self.policy.max_metrics:
            problems.append(MetricLimit(
                f"{len(declarations)} metrics declared; the host keeps the first "
                f"{self.policy.max_metrics}", plugin_id=plugin_id))
        for item in declarations[:self.policy.max_metrics]:
            try:
                name, kind, text, labels, buckets = _declaration(item, self.policy)
                if name in mine:
                    raise MetricRefused(f"metric {name} is declared twice")
                mine[name] = _Declared(kind, labels, self._collector(
                    plugin_id, name, kind, text, labels, buckets))
            except WasmextError as err:
                err.plugin_id = plugin_id
                problems.append(err)
        with self._lock:
            self._plugins[plugin_id] = mine
        return problems

    def _collector(self, plugin_id: str, name: str, kind: str, text: str,
                   labels: tuple[str, ...], buckets: tuple[float, ...] | None) -> Any:
        full = exported_name(plugin_id, name)
        doc = text or f"{name}, declared by plugin {plugin_id}"
        from prometheus_client import Counter, Gauge, Histogram

        try:
            if kind == "counter":
                return Counter(full, doc, labels, registry=self.registry)
            if kind == "gauge":
                return Gauge(full, doc, labels, registry=self.registry)
            if buckets is not None:
                return Histogram(full, doc, labels, registry=self.registry, buckets=buckets)
            return Histogram(full, doc, labels, registry=self.registry)
        except ValueError as exc:  # another plugin's metric, or the host's, has the name
            raise MetricRefused(f"metric {name}: the name {full} is taken") from exc

    def forget(self, plugin_id: str) -> None:
        """Stop exporting a plugin's metrics (it unloaded, or registers again)."""
        with self._lock:
            gone = self._plugins.pop(plugin_id, {})
        for declared in gone.values():
            with contextlib.suppress(KeyError):  # never registered: nothing to remove
                self.registry.unregister(declared.collector)

    def names(self, plugin_id: str) -> dict[str, str]:
        """A plugin's declared metrics: name -> kind."""
        with self._lock:
            return {n: d.kind for n, d in self._plugins.get(plugin_id, {}).items()}

    def update(self, plugin_id: str, op: str, req: Mapping[str, Any]) -> None:
        """Apply one `metric.add` / `metric.set` / `metric.observe` request; OpError
        (invalid, not_found, limit) when it cannot, with nothing changed."""
        name = req.get("name")
        with self._lock:
            declared = self._plugins.get(plugin_id, {}).get(name) \
                if isinstance(name, str) else None
            if declared is None:
                raise OpError("not_found", f"no declared metric {_shown(name)}")
            wants = {"metric.add": ("counter", "gauge"), "metric.set": ("gauge",),
                     "metric.observe": ("histogram",)}[op]
            if declared.kind not in wants:
                raise OpError("invalid", f"{op} does not apply to {declared.kind} {name}")
            value = req.get("value", 1 if op == "metric.add" else None)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise OpError("invalid", "'value' must be a finite number")
            if declared.kind == "counter" and value < 0:
                raise OpError("invalid", "a counter only goes up: 'value' must be >= 0")
            key = self._series(declared, req.get("labels", {}))
            if key not in declared.series:
                if len(declared.series) >= self.policy.max_series_per_metric:
                    raise OpError("limit", f"metric {name} has "
                                  f"{self.policy.max_series_per_metric} label-value "
                                  "combinations, the host's cap")
                total = sum(len(d.series) for d in self._plugins[plugin_id].values())
                if total >= self.policy.max_series_per_plugin:
                    raise OpError("limit", f"the plugin has {total} series, the host's cap")
                declared.series.add(key)
            target = declared.collector.labels(*key) if declared.labels \
                else declared.collector
            if op == "metric.set":
                target.set(value)
            elif op == "metric.observe":
                target.observe(value)
            else:  # add: a counter's value was checked >= 0, a gauge's may be negative
                target.inc(value)

    def _series(self, declared: _Declared, labels: Any) -> tuple[str, ...]:
        if not isinstance(labels, Mapping) or set(labels) != set(declared.labels):
            raise OpError("invalid", "'labels' must give exactly the declared labels: "
                          f"{', '.join(declared.labels) or 'none'}")
        values = []
        for label in declared.labels:
            value = labels[label]
            if not isinstance(value, str):
                raise OpError("invalid", f"label {label}: the value must be a string")
            values.append(clean(value, self.policy.max_label_value_chars))
        return tuple(values)
