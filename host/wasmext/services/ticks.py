"""Periodic `on_tick` calls (ABI minor 2): a plugin asks for them in its registration map.

    "hooks": [{"hook": "on_tick"}], "tick": {"interval_ms": 5000}

One daemon thread per host runs every plugin's ticks, each an ordinary hook call through
the host (`deliver`): the plugin's own budgets (fuel, memory, deadline, host calls) and
failure policy apply, a faulting plugin is quarantined like any other. The host's
TickPolicy bounds what a plugin may ask for: an interval below `min_interval_ms` is
raised to it, and past `max_ticking_plugins` a plugin's ticks are refused
(TickRefused). Ticks never queue up: a tick that runs late or long makes the ones it
overlapped disappear, and the next tick's data says how many (`{"missed": n}`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wasmext.errors import TickRefused, WasmextError
from wasmext.forks import renew_in_children

__all__ = ["TickPolicy", "Ticker", "tick_interval"]

log = logging.getLogger("wasmext.services.ticks")


@dataclass(frozen=True)
class TickPolicy:
    """The host's bounds on plugin ticks."""

    min_interval_ms: int = 1000
    max_interval_ms: int = 86_400_000
    max_ticking_plugins: int = 64


def tick_interval(plugin_id: str, tick: Any, policy: TickPolicy) -> int:
    """The interval (ms) a registration's "tick" asks for, within the policy; TickRefused
    when it is no request at all."""
    interval = tick.get("interval_ms") if isinstance(tick, dict) else None
    if isinstance(interval, bool) or not isinstance(interval, int) or interval <= 0:
        raise TickRefused("'tick' must be a map with a positive integer 'interval_ms'",
                          plugin_id=plugin_id)
    return min(max(interval, policy.min_interval_ms), policy.max_interval_ms)


@dataclass
class _Tick:
    interval: float  # seconds
    due: float       # time.monotonic()
    missed: int = 0


class Ticker:
    """Calls `deliver(plugin_id, "on_tick", {"missed": n})` for each ticking plugin."""

    def __init__(self, deliver: Callable[[str, str, Any], Any],
                 policy: TickPolicy | None = None) -> None:
        self.deliver = deliver
        self.policy = policy or TickPolicy()
        self.ticks_run = 0
        self._ticks: dict[str, _Tick] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        renew_in_children(self)

    def start(self, plugin_id: str, interval_ms: int) -> None:
        """Tick `plugin_id` every `interval_ms` (already within the policy), first after one
        interval; TickRefused past `max_ticking_plugins`."""
        with self._cond:
            if plugin_id not in self._ticks and \
                    len(self._ticks) >= self.policy.max_ticking_plugins:
                raise TickRefused(f"{len(self._ticks)} plugins tick already, the host's cap",
                                  plugin_id=plugin_id)
            seconds = interval_ms / 1000
            self._ticks[plugin_id] = _Tick(seconds, time.monotonic() + seconds)
            self._start_thread()
            self._cond.notify()

    def _start_thread(self) -> None:
        """The ticking thread, unless it runs (the condition is held)."""
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name="wasmext-ticks",
                                            daemon=True)
            self._thread.start()

    def _after_fork(self) -> None:
        """In a forked child: the parent's thread is gone (and its condition may have
        been held), so the plugins' ticks run on a thread of the child's own."""
        self._cond = threading.Condition()
        self._thread = None
        if self._ticks:
            self._start_thread()

    def stop(self, plugin_id: str) -> None:
        """No more ticks for `plugin_id` (one running now finishes)."""
        with self._cond:
            self._ticks.pop(plugin_id, None)
            self._cond.notify()

    def close(self) -> None:
        """Stop every tick and the thread."""
        with self._cond:
            self._closed = True
            self._ticks.clear()
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _next(self) -> tuple[str, _Tick] | None:
        """The next due tick, waiting for it; None when closed."""
        with self._cond:
            while not self._closed:
                if not self._ticks:
                    self._cond.wait()
                    continue
                pid, tick = min(self._ticks.items(), key=lambda item: item[1].due)
                wait = tick.due - time.monotonic()
                if wait <= 0:
                    return pid, tick
                self._cond.wait(wait)
            return None

    def _run(self) -> None:
        while (due := self._next()) is not None:
            pid, tick = due
            started = tick.due
            try:
                self.deliver(pid, "on_tick", {"missed": tick.missed})
            except WasmextError as err:  # the failure policy has recorded it already
                log.warning("plugin %s on_tick: %s", pid, err.describe())
            except Exception:  # the ticker outlives any one tick
                log.exception("plugin %s on_tick failed", pid)
            self.ticks_run += 1
            with self._cond:
                if self._ticks.get(pid) is not tick:
                    continue  # stopped, or started again, while it ran
                # Coalesce: the next tick is the first grid point after now; the ones in
                # between are counted, never run.
                now = time.monotonic()
                late = max(0, int((now - started) // tick.interval))
                tick.missed = late
                tick.due = started + (late + 1) * tick.interval
