"""One plugin call's budget, written once for every backend.

A call is bounded by its wall-clock deadline (clamped to its caller's in a
nested call: `calltree`), by a count of host calls (shared with its callers)
and by the time its host calls take (`host_call_timeout_ms`). Time the host
spends on its own behalf inside a host call is credited back: a middleware
`next` running the host's inner layers (`CallContext.nested_seconds`) and
waits on host storage (`waited_seconds`). Crediting moves the deadline, so a
guest store's epoch deadline is re-armed. A cancel (`callscope`) moves the
frame's deadline to the past and interrupts the guest (`interrupt`).

Native instances (`instance.PluginInstance`), component instances
(`backends.component_instance`) and Extism plugins (`backends.extism`) each
own one `CallBudget` and enter it around every guest call; their host-call
paths run the host's work through `host_call`. A limit that is hit is recorded
as the call's `abort` and raised: the backend reports that error whatever the
guest makes of the trap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from wasmext.errors import HostCallLimitExceeded, PluginFault
from wasmext.sandbox import calltree
from wasmext.sandbox.engine import SharedEngine
from wasmext.sandbox.faults import timeout
from wasmext.sandbox.hostcalls import CallContext
from wasmext.sandbox.limits import Limits

__all__ = ["CallBudget"]

T = TypeVar("T")

# Host-call time is measured with `perf_counter` and deadlines with `monotonic`. Where
# both are the same clock (Linux: CLOCK_MONOTONIC for both) one reading serves both,
# so a host call reads the clock three times instead of seven; elsewhere (Windows'
# `monotonic` ticks in milliseconds) each keeps its own clock.
ONE_CLOCK = (time.get_clock_info("perf_counter").implementation ==
             time.get_clock_info("monotonic").implementation)


class CallBudget:
    """Deadline, host calls, host-call time and credits of one guest's calls."""

    __slots__ = ("abort", "checked_at", "ctx", "frame", "guest", "host_budget_s",
                 "host_seconds", "limits", "rearm", "ticks")

    def __init__(self, limits: Limits, ctx: CallContext, guest: Any, ticks: int = 0,
                 rearm: Callable[[int], None] | None = None) -> None:
        self.limits = limits
        self.ctx = ctx
        self.guest = guest  # what the call-tree frame names (import functions find it there)
        self.ticks = ticks  # a store's epoch ticks for a whole call (1: a watched store)
        self.rearm = rearm  # sets the store's epoch deadline; None: no store of ours
        self.frame = calltree.Frame(0.0, 0, None)
        self.host_seconds = 0.0
        self.checked_at = 0.0  # the perf_counter of the last check_time
        self.host_budget_s = limits.host_call_timeout_ms / 1000  # once, not per host call
        self.abort: PluginFault | None = None

    # -- a guest call --------------------------------------------------------------

    def enter(self, started: float | None = None) -> int:
        """Open this call's frame in the call tree; the epoch ticks the store gets.

        `started` (a `time.monotonic()` reading) backdates the call's start: the host's
        work for the call before the guest runs (converting its arguments) is its time."""
        self.abort = None
        self.host_seconds = 0.0
        now = time.monotonic()
        self.frame = frame = calltree.enter(now if started is None else started,
                                            self.limits.timeout_ms / 1000,
                                            self.limits.max_host_calls, self.guest)
        if not frame.clamped and started is None:
            return self.ticks
        return min(self.ticks, SharedEngine.ticks_for(max(0, int((frame.deadline - now) * 1000))))

    def leave(self) -> None:
        """Close the frame; the callers have spent the host calls this call used."""
        calltree.leave(self.frame)

    def seconds_left(self) -> float:
        """Seconds to this call's deadline (negative once passed)."""
        return self.frame.deadline - time.monotonic()

    def fail(self, err: PluginFault) -> NoReturn:
        """Abort the running call with `err` (the first abort is the one reported)."""
        if self.abort is None:
            self.abort = err
        raise err

    def timeout_error(self, why: str) -> PluginFault:
        """The error of a deadline passed during `why`: `Timeout`, or `Cancelled`."""
        return timeout(why, self.limits, self.ctx, self.frame.clamped)

    def timed_out(self, why: str) -> NoReturn:
        """The deadline passed during `why` (or the call was cancelled): fail."""
        self.fail(self.timeout_error(why))

    # -- host calls ----------------------------------------------------------------

    def charge_host_call(self) -> None:
        """Count one host call against this call and every caller above it."""
        if self.abort is not None:  # the guest swallowed nothing: a trap is on its way
            raise self.abort
        frame = self.frame
        frame.calls_left -= 1
        if frame.calls_left < 0:
            self.fail(HostCallLimitExceeded(
                f"more than {self.limits.max_host_calls} host calls in one call" if
                frame.parent is None else "the call tree ran out of host calls (a nested "
                "call's host calls count against its callers' max_host_calls)",
                plugin_id=self.ctx.plugin_id, hook=self.ctx.hook))

    def host_call(self, started: float, work: Callable[..., T], *args: Any) -> T:
        """Run the host's side of one host call (already charged) within the budget.

        Whatever `work` causes through the call tree (a tool call into plugins, a host
        or MCP tool) ends by this call's deadline and by the end of its host-call time,
        which bound the frame's deadline while it runs. Ops that wait on the world
        (`http.fetch`, `llm.complete`, storage) read `ctx.deadline`, the call's, and
        report that time as waited. `started` is the `perf_counter` the host call began;
        `work(*args)` runs (arguments, not a closure made per call).
        """
        ctx, frame = self.ctx, self.frame
        ctx.nested_seconds = ctx.waited_seconds = 0.0
        deadline = frame.deadline
        # `started` as the present: a little early, so the bound is, if anything, tighter.
        frame.deadline = bounded = min(deadline, (started if ONE_CLOCK else time.monotonic())
                                       + (self.host_budget_s - self.host_seconds))
        try:
            answer = work(*args)
        finally:
            # A cancel during `work` moved the deadline to the past: keep that.
            frame.deadline = deadline if frame.deadline >= bounded \
                else min(deadline, frame.deadline)
        nested = ctx.nested_seconds
        if nested:  # middleware `next` ran the host's inner layers: not our time
            started += nested
            frame.deadline += nested
            parent = frame.parent  # ... but a nested call never outlives its caller
            if parent is not None and parent.deadline < frame.deadline:
                frame.deadline = parent.deadline
            ctx.deadline = frame.deadline
            if self.rearm is not None:
                left_ms = int((frame.deadline - time.monotonic()) * 1000)
                # never past our own, which is one tick when watched
                self.rearm(min(self.ticks, SharedEngine.ticks_for(max(0, left_ms))))
        self.check_time(started + ctx.waited_seconds)  # waiting on storage is the host's time
        return answer

    def check_time(self, started: float) -> None:
        """After host work begun at `started`: its time is ours; past a budget, fail.
        The `perf_counter` it read is kept as `checked_at` (host work that follows at
        once starts there, without a reading of its own)."""
        self.checked_at = now = time.perf_counter()
        self.host_seconds += now - started
        self.verdict(now)

    def verdict(self, now: float) -> None:
        """Fail the call if its host-call time, its host calls or its deadline are spent,
        in that order; `now` is the `perf_counter` the time was charged at. (A host call
        of an in-memory op charges its time inline and calls this only when one of the
        three is over: `PluginInstance.on_host_call`.)"""
        if self.host_seconds > self.host_budget_s:
            self.fail(HostCallLimitExceeded(
                f"more than {self.limits.host_call_timeout_ms} ms spent in host calls",
                plugin_id=self.ctx.plugin_id, hook=self.ctx.hook))
        if self.frame.calls_left < 0:  # a nested call used up our host calls
            self.charge_host_call()
        if (now if ONE_CLOCK else time.monotonic()) >= self.frame.deadline:
            self.timed_out("a host call")
