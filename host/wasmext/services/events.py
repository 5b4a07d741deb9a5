"""The host's event bus and metrics, wired to plugins.

Grants for events are capability strings: `events` enables the `event.emit`
op at all; `emit:<pattern>` and `subscribe:<pattern>` name the topics (a
pattern is a topic, `prefix.*` or `*`). A plugin subscribes by listing
patterns under `"subscriptions"` in its registration map; each event is then
delivered as its `on_event` hook with `{"topic", "payload"}`, on a bus worker
thread, never inside the emitting call. Each plugin has its own bounded queue
and at most one worker at a time: a slow plugin (or a slow Python subscriber)
drops only its own events, counted in `extension.events.dropped{subscriber}`.

A plugin that negotiated ABI minor 2 may declare its own metrics under "metrics"
(observe.pluginmetrics) and update them with `metric.add`, `metric.set` and
`metric.observe`; they are exported beside the host's own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wasmext._abi import ABI_MINOR
from wasmext.errors import WasmextError
from wasmext.observe.events import EventBus, EventError, Subscription, pattern_covers, topic_matches
from wasmext.observe.metrics import Metrics
from wasmext.observe.pluginmetrics import PluginMetrics
from wasmext.sandbox.codec import encode
from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError
from wasmext.services.ticks import Ticker, tick_interval

if TYPE_CHECKING:
    from wasmext.services.hostview import LoadedPlugin, PluginHost

__all__ = ["CONTAINER_BYTES", "Observer", "footprint"]

log = logging.getLogger("wasmext.services.events")


CONTAINER_BYTES = 64  # about what an empty dict or list costs in Python, beyond its bytes


def footprint(payload: Any) -> int:
    """What a plugin's payload costs a subscriber's queue: its MessagePack bytes plus
    CONTAINER_BYTES per map or array (a 256 KiB array of empty maps is 15 MB in Python).
    Linear in the containers, a fraction of the decode the request already cost."""
    if payload is None:
        return 0
    containers, level = 0, [payload] if type(payload) in _NESTS else []
    while level:
        containers += len(level)
        below: list[Any] = []
        for item in level:
            values = item.values() if type(item) is dict else item
            if not _NESTS.isdisjoint(set(map(type, values))):  # the item types, in C
                below.extend(v for v in values if type(v) in _NESTS)
        level = below
    return len(encode(payload)) + CONTAINER_BYTES * containers


_NESTS = frozenset({dict, list})  # what a decoded MessagePack map or array is


class Observer:
    """Owns the EventBus and Metrics of one Host."""

    def __init__(self, host: PluginHost) -> None:
        self.host = host
        self.metrics = Metrics()
        self.bus = EventBus(may_emit=self._may("emit"), may_subscribe=self._may("subscribe"),
                            observer=self.metrics.record_event,
                            drop_observer=self.metrics.record_event_dropped)
        self._subs: dict[str, Subscription] = {}
        self.plugin_metrics = PluginMetrics(lambda: self.metrics.registry)
        self.ticks = Ticker(self._deliver_tick)  # the host sets ticks.policy from its config

    def _may(self, action: str) -> Callable[[str, str], bool]:
        covers = pattern_covers if action == "subscribe" else topic_matches

        def allowed(plugin_id: str, topic: str) -> bool:
            lp = self.host.plugins.get(plugin_id)
            if lp is None or "events" not in lp.plugin.grants:
                return False
            prefix = f"{action}:"
            return any(covers(g[len(prefix):], topic) for g in lp.plugin.grants
                       if g.startswith(prefix))
        return allowed

    def install(self, services: HostServices) -> None:
        """Register the event.emit and metric.* host calls; count host calls in the metrics."""
        def emit(ctx: CallContext, req: dict[str, Any]) -> int:
            try:
                payload = req.get("payload")
                return self.bus.emit_from(ctx.plugin_id, req.get("topic"), payload,
                                          footprint(payload))
            except EventError as exc:
                raise OpError(exc.code, exc.message) from None
        services.register("event.emit", emit)
        for op in ("metric.add", "metric.set", "metric.observe"):
            services.register(op, self._metric_op(op))
        services.observer = self.metrics.record_host_call

    def _metric_op(self, op: str) -> Callable[[CallContext, dict[str, Any]], None]:
        def update(ctx: CallContext, req: dict[str, Any]) -> None:
            self.plugin_metrics.update(ctx.plugin_id, op, req)  # OpError is the answer
        return update

    # -- plugin lifecycle ------------------------------------------------------------

    def loaded(self, lp: LoadedPlugin) -> None:
        """Count the load, emit plugin.loaded, declare metrics, start ticks, subscribe to topics."""
        self.metrics.record_registration("register", lp.id)
        self.bus.emit_runtime("plugin.loaded", plugin_id=lp.id,
                              version=lp.manifest.version if lp.manifest else None)
        self._declare_metrics(lp)
        self._start_ticks(lp)
        patterns = lp.plugin.registration.extra.get("subscriptions")
        if not patterns:
            return
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            log.error("plugin %s: 'subscriptions' must be an array of topic patterns", lp.id)
            return
        try:
            self._subs[lp.id] = self.bus.subscribe_plugin(lp.id, patterns, self._deliver)
        except WasmextError as err:
            log.error("plugin %s: subscriptions refused: %s", lp.id, err.message)
            self.host.load_errors.append(err)

    def _declare_metrics(self, lp: LoadedPlugin) -> None:
        reg = lp.plugin.registration
        declared = reg.extra.get("metrics")
        # A key of minor 2: an older guest's "metrics" means something else, if anything.
        if declared is None or min(ABI_MINOR, reg.abi_minor) < 2:
            self.plugin_metrics.forget(lp.id)
            return
        for err in self.plugin_metrics.declare(lp.id, declared):
            log.error("plugin %s: %s", lp.id, err.message)
            self.host.load_errors.append(err)

    def _start_ticks(self, lp: LoadedPlugin) -> None:
        reg = lp.plugin.registration
        tick = reg.extra.get("tick")
        if tick is None or min(ABI_MINOR, reg.abi_minor) < 2 or "on_tick" not in reg.hook_names:
            self.ticks.stop(lp.id)
            return
        try:
            self.ticks.start(lp.id, tick_interval(lp.id, tick, self.ticks.policy))
        except WasmextError as err:
            log.error("plugin %s: %s", lp.id, err.message)
            self.host.load_errors.append(err)

    def _deliver_tick(self, plugin_id: str, hook: str, data: Any) -> None:
        if plugin_id in self.host.plugins:
            self.host.deliver(plugin_id, hook, data)  # its budgets and failure policy

    def unloaded(self, plugin_id: str) -> None:
        """Stop a plugin's ticks and subscriptions, forget its metrics, emit plugin.unloaded."""
        self.ticks.stop(plugin_id)
        self.plugin_metrics.forget(plugin_id)
        sub = self._subs.pop(plugin_id, None)
        if sub is not None:
            sub.close()
        self.metrics.record_registration("unregister", plugin_id)
        self.bus.emit_runtime("plugin.unloaded", plugin_id=plugin_id)

    def _deliver(self, plugin_id: str, topic: str, payload: Any) -> None:
        if plugin_id not in self.host.plugins:
            return
        # deliver applies the failure policy and records the fault; never raise here.
        try:
            self.host.deliver(plugin_id, "on_event", {"topic": topic, "payload": payload})
        except WasmextError as err:
            log.warning("plugin %s on_event %s: %s", plugin_id, topic, err.describe())

    # -- calls -----------------------------------------------------------------------

    def called(self, plugin_id: str, hook: str, outcome: str, started: float) -> None:
        """Record a hook call's outcome and duration."""
        self.metrics.record_callback(plugin_id, hook, outcome, time.perf_counter() - started)

    def faulted(self, plugin_id: str, hook: str, reason: str) -> None:
        """Emit plugin.faulted with the reason (never the guest's message)."""
        # The reason only: a fault's message is guest text and may be anything.
        self.bus.emit_runtime("plugin.faulted", plugin_id=plugin_id, hook=hook, reason=reason)

    def close(self) -> None:
        """Close the event bus."""
        self.ticks.close()
        self.bus.close()
