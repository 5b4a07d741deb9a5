"""The shipped Grafana dashboard (docs/grafana/wasmext.json) queries only metrics, and
labels, that a host and its remote callers and workers actually export."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from wasmext.cluster.metrics import RemoteMetrics, WorkerMetrics
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.observe.metrics import METRICS, PROMETHEUS_NAMES, Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "wasmext.json"
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
            "unless", "bool", "offset", "le", "inf"}
_LABELS = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_NAME = re.compile(r"(?<![\w$.])([A-Za-z_:][\w:]*)\b(?!\s*\()")


def exported() -> dict[str, set[str]]:
    """Every sample name the registry of a host with a remote caller and a worker
    exports, with the labels of its family (seen on its samples, or declared in METRICS
    for a family with no series yet)."""
    from wasmext.cluster.worker import Counts

    metrics = Metrics()
    registry: CollectorRegistry = metrics.registry
    caller = RemoteCaller(parse_registry({"guard": {"type": "validator",
                                                    "subject": "w.ext.validate.guard.v1"}}),
                          link=None)  # type: ignore[arg-type]  # only its stats are read
    caller.stats["guard"].ok = 1
    caller.stats["guard"].observe(4.2)
    RemoteMetrics(caller).register(registry)
    WorkerMetrics.add(registry, "w1", lambda: {"w.ext.validate.guard.v1": ("guard", Counts())})
    declared = {dotted.replace(".", "_").removesuffix("_total"): set(labels)
                for dotted, (_kind, labels, _doc) in METRICS.items()}
    names: dict[str, set[str]] = {}
    for family in registry.collect():
        labels = declared.get(family.name, set()) | {k for s in family.samples
                                                     for k in s.labels}
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                    "gauge": ("",), "summary": ("", "_sum", "_count")}[family.type]
        for suffix in suffixes:
            names[family.name + suffix] = labels - {"le"} | (
                {"le"} if suffix == "_bucket" else set())
    return names


def expressions(node: Any) -> list[str]:
    """Every PromQL expression in the dashboard: panel targets and template queries."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            promql = key in ("expr", "definition") or (key == "query" and "(" in str(value))
            if promql and isinstance(value, str):
                found.append(value)
            else:
                found.extend(expressions(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(expressions(item))
    return found


def metric_names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression uses."""
    labels = {label.strip() for group in _LABELS.findall(expr) for label in group.split(",")}
    for matchers in _MATCHERS.findall(expr):
        labels |= {m.split("=")[0].split("!")[0].strip() for m in matchers.split(",") if m}
    plain = _MATCHERS.sub(" ", _LABELS.sub(" ", re.sub(r"\[[^\]]*\]", " ", expr)))
    plain = re.sub(r'"[^"]*"', " ", plain)
    names = {n for n in _NAME.findall(plain) if n not in KEYWORDS and not n[0].isdigit()}
    if expr.startswith("label_values("):  # label_values(metric, label)
        metric, _, label = expr[len("label_values("):-1].partition(",")
        return {metric.strip()}, {label.strip()}
    return names, labels - {""}


def test_every_metric_in_the_dashboard_is_exported() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"], "no panels"
    known = exported()
    exprs = expressions(dashboard)
    assert len(exprs) >= len(dashboard["panels"])
    used: set[str] = set()
    for expr in exprs:
        names, labels = metric_names(expr)
        assert names, expr
        unknown = names - set(known)
        assert not unknown, f"{expr}: {unknown} is not exported"
        allowed = set().union(*(known[n] for n in names))
        assert labels <= allowed, f"{expr}: labels {labels - allowed} not on {names}"
        used |= names
    # Every seed metric has a panel.
    for dotted, name in PROMETHEUS_NAMES.items():
        kind = METRICS[dotted][0]
        assert any(u == name or (kind == "histogram" and u.startswith(name + "_"))
                   for u in used), f"no panel shows {name}"


def test_the_checker_catches_a_wrong_name() -> None:
    names, labels = metric_names(
        'sum by (extension_id) (rate(extension_calback_total{outcome="fault"}[5m]))')
    assert names == {"extension_calback_total"} and labels == {"extension_id", "outcome"}
    assert "extension_calback_total" not in exported()
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
