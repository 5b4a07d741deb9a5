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

A store no other process can reach (the memory backend: `process_local`) is
not written at all: the count is kept beside it in this process, one table
per store shared by every ledger on it, under one lock. It holds the same
guarantees (everything that can share the store shares the table, and the
count is gone when the store is) without a store commit per change.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import msgpack

from wasmext.sandbox.hostcalls import OpError
from wasmext.state import CasConflict, Scope, StateError, StateStore

__all__ = ["LEDGER_SCOPE", "DayLedger"]

LEDGER_SCOPE = "@llm-usage"  # '@' is not allowed in a plugin id: no plugin reaches it
_TTL_S = 2 * 86400.0
_ATTEMPTS = 64


class _Counts:
    """The day's count per plugin, in this process: for a ledger without a store or
    beside a process-local one. Only the latest day is kept."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.day = ""
        self.used: dict[str, int] = {}

    def update(self, plugin_id: str, day: str, change: Callable[[int], int]) -> None:
        with self.lock:
            if day != self.day:
                if day < self.day:
                    # A change of a day that is over (a call that started before
                    # midnight) counts against nothing any more; a reservation is still
                    # held to the budget on its own.
                    change(0)
                    return
                self.day, self.used = day, {}
            self.used[plugin_id] = change(self.used.get(plugin_id, 0))

    def get(self, plugin_id: str, day: str) -> int:
        with self.lock:
            return self.used.get(plugin_id, 0) if day == self.day else 0


# One table per process-local store: every ledger on the store shares it, and it goes
# with the store.
_beside: weakref.WeakKeyDictionary[StateStore, _Counts] = weakref.WeakKeyDictionary()
_beside_lock = threading.Lock()


def _counts_beside(store: StateStore) -> _Counts:
    with _beside_lock:
        counts = _beside.get(store)
        if counts is None:
            counts = _beside[store] = _Counts()
        return counts


class DayLedger:
    """Reserve and settle tokens per (plugin, day), in a store or, without one, in memory."""

    def __init__(self, store: Callable[[], StateStore] | None = None) -> None:
        self._store = store
        # Counts kept in this process: without a store, or beside a process-local one
        # (decided when the store is first needed: the Host opens it lazily).
        self._local: _Counts | None = _Counts() if store is None else None
        self._decided = store is None
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
        local = self._local_counts()
        if local is not None:
            return local.get(plugin_id, day)
        return _decode(self._read(plugin_id, day))

    def _local_counts(self) -> _Counts | None:
        if not self._decided:
            assert self._store is not None
            try:
                store = self._store()
            except StateError as err:
                raise OpError("unavailable", "the token ledger cannot be reached: "
                              f"{err.reason}") from None
            if getattr(store, "process_local", False):  # a wrapper of a store: durable
                self._local = _counts_beside(store)
            self._decided = True
        return self._local

    def _update(self, plugin_id: str, day: str, change: Callable[[int], int]) -> None:
        local = self._local_counts()
        if local is not None:
            local.update(plugin_id, day, change)
            return
        assert self._store is not None
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
