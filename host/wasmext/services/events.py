"""The host's event bus and metrics, wired to plugins.

Grants for events are capability strings: `events` enables the `event.emit`
op at all; `emit:<pattern>` and `subscribe:<pattern>` name the topics (a
pattern is a topic, `prefix.*` or `*`). A plugin subscribes by listing
patterns under `"subscriptions"` in its registration map; each event is then
delivered as its `on_event` hook with `{"topic", "payload"}`, on a bus worker
thread, never inside the emitting call. Each plugin has its own bounded queue
and at most one worker at a time: a slow plugin (or a slow Python subscriber)
drops only its own events, counted in `extension.events.dropped{subscriber}`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wasmext.errors import WasmextError
from wasmext.observe.events import EventBus, EventError, Subscription, pattern_covers, topic_matches
from wasmext.observe.metrics import Metrics
from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError

if TYPE_CHECKING:
    from wasmext.services.hostview import LoadedPlugin, PluginHost

__all__ = ["Observer"]

log = logging.getLogger("wasmext.services.events")


class Observer:
    """Owns the EventBus and Metrics of one Host."""

    def __init__(self, host: PluginHost) -> None:
        self.host = host
        self.metrics = Metrics()
        self.bus = EventBus(may_emit=self._may("emit"), may_subscribe=self._may("subscribe"),
                            observer=self.metrics.record_event,
                            drop_observer=self.metrics.record_event_dropped)
        self._subs: dict[str, Subscription] = {}

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
        def emit(ctx: CallContext, req: dict[str, Any]) -> int:
            try:
                return self.bus.emit_from(ctx.plugin_id, req.get("topic"), req.get("payload"))
            except EventError as exc:
                raise OpError(exc.code, exc.message) from None
        services.register("event.emit", emit)
        services.observer = self.metrics.record_host_call

    # -- plugin lifecycle ------------------------------------------------------------

    def loaded(self, lp: LoadedPlugin) -> None:
        self.metrics.record_registration("register", lp.id)
        self.bus.emit_runtime("plugin.loaded", plugin_id=lp.id,
                              version=lp.manifest.version if lp.manifest else None)
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

    def unloaded(self, plugin_id: str) -> None:
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
        self.metrics.record_callback(plugin_id, hook, outcome, time.perf_counter() - started)

    def faulted(self, plugin_id: str, hook: str, reason: str) -> None:
        # The reason only: a fault's message is guest text and may be anything.
        self.bus.emit_runtime("plugin.faulted", plugin_id=plugin_id, hook=hook, reason=reason)

    def close(self) -> None:
        self.bus.close()
