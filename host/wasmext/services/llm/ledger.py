"""Tokens each plugin spent today, kept where the plugins' state is kept.

A daily budget held only in memory starts again at every restart: a plugin
that spent its day's tokens would have them back after a crash or a deploy,
and each NATS worker would grant the whole budget again. So the day's count
lives in the state store (sqlite under data_dir, or the shared Redis), under a
scope no plugin can name: `@llm-usage`, one key per plugin per UTC day, with a
two-day TTL. A reservation is written before the request is sent (a kill while
the model answers keeps it: spent, never lost) and is replaced by the reported
usage after. Each change is a compare-and-set, so processes sharing a store
cannot overrun the budget together. When the store cannot be reached the
op fails closed (`unavailable`): a budget that cannot be read is not granted.

Each change is one atomic commit, so a kill at any moment leaves the day's
count as it was before that change or after it. The value this process last
read or wrote is kept and offered as the compare-and-set's expected value, so
a change costs one store operation instead of a read and a write; the store
still decides (another process's write in between makes it a conflict, and
the value is read again), so the cache never lets a change pass the budget.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import msgpack

from wasmext.sandbox.hostcalls import OpError
from wasmext.state import CasConflict, Scope, StateError, StateStore

__all__ = ["LEDGER_SCOPE", "DayLedger"]

LEDGER_SCOPE = "@llm-usage"  # '@' is not allowed in a plugin id: no plugin reaches it
_TTL_S = 2 * 86400.0
_ATTEMPTS = 64


class DayLedger:
    """Reserve and settle tokens per (plugin, day), in a store or, without one, in memory."""

    def __init__(self, store: Callable[[], StateStore] | None = None) -> None:
        self._store = store
        self._memory: dict[tuple[str, str], int] = {}
        # The value of each (plugin, day) key as this process last saw it in the store:
        # only ever a guess for the compare-and-set, which the store checks.
        self._seen: dict[tuple[str, str], bytes | None] = {}
        self._lock = threading.Lock()

    def reserve(self, plugin_id: str, day: str, tokens: int, budget: int) -> None:
        """Add `tokens` to the day, or raise OpError('limit') if that would pass `budget`."""
        def grow(used: int) -> int:
            if used + tokens > budget:
                raise OpError("limit", f"plugin {plugin_id}: today's token budget "
                              f"{budget} is spent ({used} used)")
            return used + tokens
        self._update(plugin_id, day, grow)

    def adjust(self, plugin_id: str, day: str, delta: int) -> None:
        """Replace part of a reservation by what was spent (never below zero)."""
        if delta:
            self._update(plugin_id, day, lambda used: max(0, used + delta))

    def used(self, plugin_id: str, day: str) -> int:
        """Tokens the plugin has used on the day."""
        if self._store is None:
            with self._lock:
                return self._memory.get((plugin_id, day), 0)
        return _decode(self._read(plugin_id, day))

    def _update(self, plugin_id: str, day: str, change: Callable[[int], int]) -> None:
        if self._store is None:
            with self._lock:
                self._memory = {k: v for k, v in self._memory.items() if k[1] == day}
                self._memory[(plugin_id, day)] = change(self._memory.get((plugin_id, day), 0))
            return
        scope, key, ref = Scope(LEDGER_SCOPE), f"{plugin_id}/{day}", (plugin_id, day)
        with self._lock:  # one writer per process; the CAS orders processes
            if any(seen[1] != day for seen in self._seen):
                self._seen = {k: v for k, v in self._seen.items() if k[1] == day}
            for _ in range(_ATTEMPTS):
                try:
                    if ref in self._seen:
                        old = self._seen.pop(ref)
                    else:
                        old = self._store().get(scope, key)
                    new = msgpack.packb(change(_decode(old)))
                    self._store().cas(scope, key, old, new, ttl=_TTL_S)
                    self._seen[ref] = new
                    return
                except CasConflict:
                    continue  # another process wrote in between (or it expired): read again
                except StateError as err:
                    raise OpError("unavailable", "the token ledger cannot be updated: "
                                  f"{err.reason}") from None
        raise OpError("unavailable", "the token ledger stayed contended; try again")

    def _read(self, plugin_id: str, day: str) -> bytes | None:
        assert self._store is not None
        try:
            return self._store().get(Scope(LEDGER_SCOPE), f"{plugin_id}/{day}")
        except StateError as err:
            raise OpError("unavailable", f"the token ledger cannot be read: {err.reason}"
                          ) from None


def _decode(raw: bytes | None) -> int:
    if raw is None:
        return 0
    try:
        value = msgpack.unpackb(raw)
    except (ValueError, msgpack.UnpackException):
        return 0
    return value if type(value) is int and value >= 0 else 0
