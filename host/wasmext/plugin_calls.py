"""Calling one plugin's hook under its failure policy: the outcome in the session's
trace, the call's metrics and span, the fault record and, for a failing plugin,
skip, reload after a backoff, or abort the hook (fail-closed).

`Host` inherits these methods; hook runners reach them through `HookHost`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from wasmext.config import HostConfig
from wasmext.errors import (
    HookAborted,
    InstancePoolFull,
    PluginError,
    PluginFault,
    Quarantined,
    WasmextError,
)
from wasmext.hooks.context import HookSession
from wasmext.hooks.ordering import Entry
from wasmext.observe import tracing
from wasmext.sandbox.instance import CallResult
from wasmext.services.events import Observer
from wasmext.services.hostview import CallFailure, FaultRecord, LoadedPlugin
from wasmext.services.tools import SESSIONS
from wasmext.state import StateUnavailable
from wasmext.text import clean

__all__ = ["PluginCalls"]

log = logging.getLogger("wasmext.host")
# `try_call`'s entries by (plugin, hook, source, load index): a frozen dataclass costs
# more to make than the rest of the call's bookkeeping. Callers may name any hook, so
# the table is emptied when full.
_TRY_ENTRIES: dict[tuple[str, str, str, int], Entry] = {}
_MAX_TRY_ENTRIES = 4096


def quarantine_note(seconds_left: float, began: bool = False) -> str:
    """A quarantine's trace detail: for how long and until when (UTC)."""
    until = time.strftime("%H:%M:%S", time.gmtime(time.time() + seconds_left))
    return (f"{'now quarantined' if began else 'quarantined'} for {seconds_left:.1f} s"
            f"{'' if began else ' more'} (until {until} UTC)")


def _quarantine_began(lp: LoadedPlugin, err: WasmextError) -> str:
    """"now quarantined for ..." when this fault put the plugin in quarantine, else ""."""
    if not isinstance(err, PluginFault):
        return ""
    left = getattr(lp.plugin, "quarantine_left_s", 0.0)  # an Extism plugin has none
    return quarantine_note(left, began=True) if left else ""


def _span_hook(hook: str) -> str:
    """A hook name fit for a span name: the plugin may have chosen it (tools, tags)."""
    return tracing.text(hook, 64)


class PluginCalls:
    """One plugin call at a time, under the plugin's (or the caller's) failure policy."""

    config: HostConfig
    plugins: dict[str, LoadedPlugin]
    observe: Observer
    faults: list[FaultRecord]

    def call(self, entry: Entry, data: Any, session: HookSession | None = None
             ) -> CallResult | None:
        """Call one plugin's hook under its failure policy.

        Returns None when the plugin failed or was skipped and its policy is
        open or reload (the caller keeps the previous value); raises
        HookAborted when it is closed. Every outcome goes into the session trace.
        """
        return self._invoke(entry, data, session, None)[0]

    def try_call(self, plugin_id: str, hook: str, data: Any,
                 session: HookSession | None = None
                 ) -> tuple[CallResult | None, str | None]:
        """Call a named plugin without its failure policy: (result, None) or
        (None, reason). The caller decides what a failure means (pipelines)."""
        lp = self.plugins.get(plugin_id)
        if lp is None:
            if session is not None:
                session.trace.note(hook, "failed", "no such plugin loaded", plugin_id)
            return None, f"plugin {plugin_id} is not loaded"
        key = (plugin_id, hook, lp.source, lp.load_index)
        entry = _TRY_ENTRIES.get(key)
        if entry is None:
            if len(_TRY_ENTRIES) >= _MAX_TRY_ENTRIES:
                _TRY_ENTRIES.clear()
            entry = _TRY_ENTRIES[key] = Entry(plugin_id, hook, 50, lp.source, lp.load_index, 0)
        return self._invoke(entry, data, session, "open")

    def deliver(self, plugin_id: str, hook: str, data: Any) -> CallResult | None:
        """Call `hook` of one plugin under its failure policy, outside any session."""
        lp = self.plugins.get(plugin_id)
        if lp is None:
            return None
        return self.call(Entry(plugin_id, hook, 50, lp.source, lp.load_index, 0), data)

    def _traced_invoke(self, traced: tracing.Tracing, entry: Entry, data: Any,
                       session: HookSession | None, policy: str | None
                       ) -> tuple[CallResult | None, str | None]:
        """`_invoke` in the hook call's span: plugin, hook, outcome, fuel, duration."""
        # A hook span's parent: the span current here (middleware next, a worker's
        # request), else its session's span (an awaited call on a pool thread).
        parent = traced.parent_for(getattr(session, "otel_context", None))
        if traced.unsampled(parent):  # a trace not kept: no span costs anything
            return self._invoke(entry, data, session, policy, traced=True)
        started = time.perf_counter()
        with traced.span(f"wasmext.hook {_span_hook(entry.hook)}", {
                "wasmext.plugin_id": tracing.text(entry.plugin_id),
                "wasmext.hook": tracing.text(entry.hook)}, parent=parent) as span:
            try:
                result, reason = self._invoke(entry, data, session, policy, traced=True)
            except BaseException:  # fail-closed (HookAborted), storage down: status says why
                span.set_attribute("wasmext.outcome", "aborted")
                raise
            span.set_attribute("wasmext.duration_ms",
                               round((time.perf_counter() - started) * 1000, 3))
            if result is not None:
                span.set_attribute("wasmext.outcome", "stop" if result.stop else "ok")
                span.set_attribute("wasmext.fuel_used", int(result.fuel or 0))
            else:
                failure = isinstance(reason, CallFailure)
                span.set_attribute("wasmext.outcome", "failed" if failure else "skipped")
                if failure:
                    traced.failed(span, str(reason))
                else:
                    span.set_attribute("wasmext.skip_reason", tracing.text(reason or ""))
            return result, reason

    def _invoke(self, entry: Entry, data: Any, session: HookSession | None,
                policy: str | None, traced: bool = False
                ) -> tuple[CallResult | None, str | None]:
        if not traced and tracing.ACTIVE is not None:  # off: one global read per call
            return self._traced_invoke(tracing.ACTIVE, entry, data, session, policy)
        lp = self.plugins.get(entry.plugin_id)
        if lp is None:
            return None, "not loaded"
        if not self.config.hooks:
            return None, "hooks are switched off"
        trace = session.trace if session is not None else None
        if lp.reload_after and time.monotonic() < lp.reload_after:
            if trace is not None:
                trace.add(entry, "skipped", "reload backoff")
            return None, "skipped: reload backoff"
        started = time.perf_counter()
        meta: dict[str, Any] = {"session": session.id if session else None}
        if getattr(lp.plugin.registration, "abi_minor", 0) >= 1:  # minor 1 (SPEC 3.1, 4.1)
            hook_context = getattr(session, "hook_context", None)
            if hook_context is not None:
                meta["context"] = hook_context(entry.hook)
        # The plugin's tool.call finds its session here (its middleware runs there).
        sessions = SESSIONS
        asking = sessions.current
        sessions.current = session
        try:
            result = lp.plugin.call(entry.hook, data, meta)
        except Quarantined as err:
            self.observe.called(lp.id, entry.hook, "skipped", started)
            if trace is not None:
                trace.add(entry, "skipped", quarantine_note(err.seconds_left)
                          if err.seconds_left is not None else f"quarantined: {err.message}")
            return None, "quarantined"
        except (StateUnavailable, InstancePoolFull) as err:
            # The host's storage failed the call, or the host has no instance slot for
            # it: the app is told as such; the plugin is not blamed (no fault record,
            # no reload, no quarantine).
            self.observe.called(lp.id, entry.hook, "error", started)
            if trace is not None:
                trace.add(entry, "failed", f"{err.reason}: {err.message}")
            raise
        except (PluginFault, PluginError) as err:
            fault = isinstance(err, PluginFault)
            self.observe.called(lp.id, entry.hook, "fault" if fault else "error", started)
            self.record_fault(lp, entry.hook, err)
            reason = err.code if isinstance(err, PluginError) else err.reason
            if fault:
                self.observe.faulted(lp.id, entry.hook, reason)
            if trace is not None:
                # The fault that starts a quarantine says so first (the message may be
                # cut): the operator learns for how long at the line where it began.
                began = _quarantine_began(lp, err)
                trace.add(entry, "failed", f"{began}; {reason}: {err.message}" if began
                          else f"{reason}: {err.message}")
            if (policy or lp.failure) == "closed":
                raise HookAborted(f"plugin {lp.id} failed in {entry.hook} and is fail-closed: "
                                  f"{reason}", cause=err, plugin_id=lp.id,
                                  hook=entry.hook) from err
            return None, CallFailure.of(f"{reason}: {err.message}", err)
        finally:
            sessions.current = asking
        self.observe.metrics.record_callback(entry.plugin_id, entry.hook, "ok",
                                             time.perf_counter() - started, result.fuel)
        lp.backoff_s = 0.5
        if trace is not None:
            outcome = "stop" if result.stop else ("changed" if result.changed else "unchanged")
            trace.add(entry, outcome, None)
        return result, None

    def record_fault(self, lp: LoadedPlugin, hook: str, err: WasmextError) -> None:
        """Log the fault, keep it in `faults` and apply the plugin's failure policy."""
        reason = err.code if isinstance(err, PluginError) else err.reason
        # Guest-written text was redacted and cleaned where it entered the host
        # (PluginLog.scrub); clean() again bounds any host-side message too.
        message = clean(err.message)
        began = _quarantine_began(lp, err)
        log.warning("plugin %s hook %s failed (%s, policy %s%s): %s", lp.id, hook, reason,
                    lp.failure, f"; {began}" if began else "", message,
                    extra={"plugin_id": lp.id, "hook": hook})
        self.faults.append(FaultRecord(lp.id, hook, reason, message, lp.failure))
        del self.faults[:-1000]
        if lp.failure == "reload" and isinstance(err, PluginFault) and \
                not getattr(err, "inherited", False):
            lp.plugin.close()  # the next call gets a fresh instance ...
            lp.reload_after = time.monotonic() + lp.backoff_s  # ... after a backoff
            lp.backoff_s = min(lp.backoff_s * 2, 60.0)
