"""The shared half of every backend: transactions and the public `StateStore` methods.

A backend subclasses `Engine` and implements its primitives (`_read`, `_keys`,
`_touch`, `_view`, `_commit`, `_purge`, `_plugins`, `_drop_plugin`, `_records`);
everything a caller sees is defined here once, so the backends cannot drift.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from wasmext.forks import FORK_WAIT_S, renew_in_children
from wasmext.state.accounting import (
    Changes,
    Plan,
    Ref,
    Sid,
    Ticker,
    View,
    Write,
    check_key,
    check_ttl,
    check_value,
    log,
    plan,
)
from wasmext.state.base import (
    CasConflict,
    CommitReport,
    Eviction,
    InvalidArgument,
    QuotaExceeded,
    Record,
    Scope,
    ScopeName,
    StateLimits,
    StateStats,
    StateStore,
    TransactionClosed,
    Usage,
    check_id,
)

__all__ = ["APPLIED_SCOPE", "Engine", "Transaction"]

# Idempotency keys live in reserved sessions of the plugin they belong to
# (`#applied:00` ... `#applied:ff`, spread so that no one scope reaches max_keys):
# a session id a worker never makes and a plugin never names.
APPLIED_SCOPE = "#applied"


def _scope_name(scope: Scope) -> ScopeName:
    return "session" if scope.session is not None else "plugin"


def _prefetch(view: View, changes: Changes) -> None:
    """Let a view that can (Redis) read what the plan needs in one round trip."""
    prefetch = getattr(view, "prefetch", None)
    if prefetch is not None:
        prefetch(changes)


class Transaction:
    """The state writes of one plugin call, invisible to others until `commit()`.

    Reads see the transaction's own pending writes. Every write is checked
    against the quotas when it is made (so a plugin learns at once that it is
    over a limit) and again, atomically, at commit. `commit()` applies all or
    nothing; `rollback()` (or an exception inside `with`) discards everything.
    The TTL refresh of the entries read is applied at commit too.
    """

    def __init__(self, store: Engine, plugin_id: str, session_id: str | None) -> None:
        self.store = store
        self.plugin_id = check_id("plugin", plugin_id)
        self.session_id = None if session_id is None else check_id("session", session_id)
        self._changes = Changes(plugin_id)
        self._touched: dict[Ref, None] = {}
        self._memo: dict[Any, Any] = {}  # what a backend keeps of this transaction's reads
        self._open = True
        self._once: Ref | None = None

    @property
    def closed(self) -> bool:
        """True once committed or rolled back."""
        return not self._open

    @property
    def pending(self) -> int:
        """How many keys and scopes this transaction would change."""
        return len(self._changes.writes) + len(self._changes.cleared)

    def _sid(self, scope: ScopeName) -> Sid:
        if not self._open:
            raise TransactionClosed("the state transaction is already closed",
                                    plugin_id=self.plugin_id)
        if scope == "plugin":
            return None
        if scope != "session":
            raise InvalidArgument(f"scope must be 'session' or 'plugin', got {scope!r}",
                                  plugin_id=self.plugin_id)
        if self.session_id is None:
            raise InvalidArgument("there is no session: use the 'plugin' scope",
                                  plugin_id=self.plugin_id)
        return self.session_id

    def _lookup(self, sid: Sid, key: str) -> tuple[bytes | None, bool]:
        """The value as this transaction sees it, and whether it came from the store."""
        w = self._changes.writes.get((sid, key))
        if w is not None:
            return w.value, False
        if sid in self._changes.cleared:
            return None, False
        value = self.store._read_within(self._memo, self.plugin_id, sid, key,
                                        self.store._now())
        if value is not None:
            self._touched[(sid, key)] = None
        return value, True

    def _stage(self, ref: Ref, write: Write) -> None:
        writes = self._changes.writes
        saved = dict(writes)
        writes.pop(ref, None)
        writes[ref] = write  # the latest write is the most recent for LRU
        if write.value is None:
            return
        try:
            self.store._check(self._changes)
        except BaseException:
            writes.clear()
            writes.update(saved)
            raise

    def get(self, key: str, *, scope: ScopeName = "session") -> bytes | None:
        """The value as this transaction sees it (its own writes included)."""
        sid = self._sid(scope)
        return self._lookup(sid, check_key(key, self.store.limits))[0]

    def set(self, key: str, value: bytes, *, scope: ScopeName = "session",
            ttl: float | None = None) -> None:
        """Stage a write, checked against the quotas now and again at commit."""
        sid = self._sid(scope)
        limits = self.store.limits
        key = check_key(key, limits)
        self._stage((sid, key), Write(check_value(value), check_ttl(ttl, limits)))

    def delete(self, key: str, *, scope: ScopeName = "session") -> bool:
        """Stage a delete; True if the key exists as this transaction sees it."""
        sid = self._sid(scope)
        key = check_key(key, self.store.limits)
        existed = self._lookup(sid, key)[0] is not None
        if existed or (sid, key) in self._changes.writes:  # else there is nothing to delete
            self._stage((sid, key), Write(None, self.store.limits.ttl_seconds))
        return existed

    def keys(self, *, scope: ScopeName = "session", prefix: str = "") -> list[str]:
        """Live keys of the scope as this transaction sees them, sorted."""
        sid = self._sid(scope)
        found: set[str] = set()
        if sid not in self._changes.cleared:
            found.update(self.store._keys_within(self._memo, self.plugin_id, sid,
                                                 self.store._now()))
        for (s, key), w in self._changes.writes.items():
            if s == sid:
                (found.discard if w.value is None else found.add)(key)
        return sorted(k for k in found if k.startswith(prefix))

    def clear(self, *, scope: ScopeName = "session") -> int:
        """Stage deleting every key of the scope; how many there were."""
        sid = self._sid(scope)
        count = len(self.keys(scope=scope))
        self._changes.cleared.add(sid)
        for ref in [r for r in self._changes.writes if r[0] == sid]:
            del self._changes.writes[ref]
        return count

    def cas(self, key: str, expected: bytes | None, new: bytes | None, *,
            scope: ScopeName = "session", ttl: float | None = None) -> None:
        """Write `new` (None: delete) if the key holds `expected` (None: absent), else
        CasConflict. Checked now and again at commit against what others committed."""
        sid = self._sid(scope)
        limits = self.store.limits
        key = check_key(key, limits)
        expected = None if expected is None else check_value(expected)
        write = Write(None if new is None else check_value(new), check_ttl(ttl, limits))
        current, from_store = self._lookup(sid, key)
        if current != expected:
            raise CasConflict(f"key {key!r} does not hold the expected value",
                              plugin_id=self.plugin_id)
        ref = (sid, key)
        added = from_store and ref not in self._changes.expect
        if added:
            self._changes.expect[ref] = expected
        try:
            self._stage(ref, write)
        except BaseException:
            if added:
                del self._changes.expect[ref]
            raise

    def once(self, key: str, ttl: float) -> None:
        """Make the commit apply at most once per idempotency `key` within `ttl` seconds:
        when a commit under `key` has landed, `commit()` applies nothing and reports
        `duplicate`. The key is written in the same atomic commit as the changes."""
        self._sid("plugin")  # refuses a closed transaction
        key = check_key(key, self.store.limits)
        bucket = hashlib.sha256(key.encode("utf-8")).hexdigest()[:2]
        ref: Ref = (f"{APPLIED_SCOPE}:{bucket}", key)
        self._changes.expect[ref] = None
        self._stage(ref, Write(b"\x01", check_ttl(ttl, self.store.limits)))
        self._once = ref

    def commit(self) -> CommitReport:
        """Apply every staged change atomically; raises TransactionClosed if already closed."""
        if not self._open:
            raise TransactionClosed("the state transaction is already closed",
                                    plugin_id=self.plugin_id)
        self._open = False
        try:
            return self.store._finish(self._changes, self._touched)
        except CasConflict:
            once = self._once
            if once is not None and self.store._read(self.plugin_id, once[0], once[1],
                                                     self.store._now()) is not None:
                return CommitReport(duplicate=True)
            raise

    def rollback(self) -> None:
        """Discard every pending write; harmless on a closed transaction."""
        self._open = False

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        if et is None and self._open:
            self.commit()
        else:
            self.rollback()


class LockedAcrossFork:
    """For a store whose every operation holds `_lock` (`forks.quiesce_at_fork`): a fork
    lets the operation in flight end (at most FORK_WAIT_S) and starts none, so the
    child's copy is whole; the parent goes on as before."""

    _lock: threading.Lock | threading.RLock
    _quiet_at_fork = False

    def _before_fork(self) -> None:
        """Wait for the operation in flight, holding the lock through the fork."""
        self._quiet_at_fork = self._lock.acquire(timeout=FORK_WAIT_S)

    def _after_fork_in_parent(self) -> None:
        """The parent goes on as before the fork."""
        if self._quiet_at_fork:
            self._quiet_at_fork = False
            self._lock.release()


class Engine(StateStore):
    """A `StateStore` built on a backend's primitives."""

    def __init__(self, limits: StateLimits | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.limits = limits or StateLimits()
        self._clock = clock
        self._ticker = Ticker()
        self._stats = StateStats()
        self._stats_lock = threading.Lock()
        renew_in_children(self)

    def _after_fork(self) -> None:
        """In a forked child: a lock a parent thread held at the fork stays held there
        for good. A backend with connections or threads of its own renews them too."""
        self._ticker = self._ticker.copy()
        self._stats_lock = threading.Lock()

    def _now(self) -> float:
        return self._clock()

    # -- primitives -----------------------------------------------------------------------

    @abstractmethod
    def _read(self, plugin: str, sid: Sid, key: str, now: float) -> bytes | None:
        """The unexpired value, without touching it."""

    def _read_within(self, memo: dict[Any, Any], plugin: str, sid: Sid, key: str,
                     now: float) -> bytes | None:
        """`_read` for one transaction; `memo` lets a backend that fetches a whole scope
        per read (JetStream) fetch it once per transaction, not once per key read."""
        return self._read(plugin, sid, key, now)

    @abstractmethod
    def _keys(self, plugin: str, sid: Sid, now: float) -> list[str]: ...

    def _keys_within(self, memo: dict[Any, Any], plugin: str, sid: Sid,
                     now: float) -> list[str]:
        """`_keys` for one transaction (`memo` as for `_read_within`)."""
        return self._keys(plugin, sid, now)

    @abstractmethod
    def _touch(self, plugin: str, refs: list[Ref], now: float) -> None:
        """Refresh TTL and LRU recency of the unexpired entries among refs, in order."""

    @abstractmethod
    def _view(self, plugin: str) -> AbstractContextManager[View]:
        """A read-only view for a dry run (it may still count expired entries)."""

    @abstractmethod
    def _commit(self, changes: Changes, now: float) -> Plan:
        """Atomically: purge the plugin's expired entries, `plan`, apply the plan."""

    @abstractmethod
    def _purge(self, now: float, plugin: str | None) -> int: ...

    @abstractmethod
    def _plugins(self) -> list[str]: ...

    @abstractmethod
    def _drop_plugin(self, plugin: str) -> int: ...

    @abstractmethod
    def _records(self, now: float) -> list[Record]: ...

    @abstractmethod
    def _import(self, batches: dict[str, Changes], replace: bool, now: float) -> None:
        """Apply every plugin's batch as ONE atomic unit (after the plan of each, `replace`
        first emptying the plugin): all plugins change, or none does."""

    # -- shared ---------------------------------------------------------------------------

    def _check(self, changes: Changes) -> None:
        """Dry-run the quotas; expired entries are purged and the check repeated if it fails."""
        now = self._now()
        try:
            try:
                with self._view(changes.plugin) as view:
                    _prefetch(view, changes)
                    plan(view, changes, now, self.limits, dry_run=True)
            except QuotaExceeded:
                if self._purge(now, changes.plugin) == 0:
                    raise
                with self._view(changes.plugin) as view:
                    plan(view, changes, now, self.limits, dry_run=True)
        except QuotaExceeded:
            with self._stats_lock:
                self._stats.rejected += 1
            raise

    def _finish(self, changes: Changes, touched: dict[Ref, None], *,
                compared_first: bool = False) -> CommitReport:
        """Commit `changes`; `compared_first`: a failed comparison is a compare-and-set
        that did not hold (not counted as a commit conflict, as when a transaction's
        `cas` finds it before committing)."""
        now = self._now()
        refs = [r for r in touched if r not in changes.writes and r[0] not in changes.cleared]
        if refs:
            self._touch(changes.plugin, refs, now)
        if not changes:
            return CommitReport()
        try:
            done = self._commit(changes, now)
        except CasConflict:
            if not compared_first:
                with self._stats_lock:
                    self._stats.conflicts += 1
            raise
        except QuotaExceeded:
            with self._stats_lock:
                self._stats.rejected += 1
            raise
        p = changes.plugin
        evicted = tuple(Eviction(p, sid, key, size) for (sid, key), size in done.evicted)
        with self._stats_lock:
            s = self._stats
            s.commits += 1
            s.evictions += len(evicted)
            s.evicted_bytes += sum(e.size for e in evicted)
            s.warnings += len(done.warnings)
            if evicted:
                s.evictions_by_plugin[p] = s.evictions_by_plugin.get(p, 0) + len(evicted)
        for e in evicted:
            log.warning("state: evicted plugin %s %s key %r (%d bytes): the plugin is over"
                        " max_plugin_bytes=%d", p, "global" if e.session is None else
                        f"session {e.session}", e.key, e.size, self.limits.max_plugin_bytes)
        for w in done.warnings:
            log.warning("state: %s", w)
        return CommitReport(evicted, tuple(done.warnings))

    def begin(self, plugin_id: str, session_id: str | None = None) -> Transaction:
        return Transaction(self, plugin_id, session_id)

    def get(self, scope: Scope, key: str) -> bytes | None:
        with self.begin(scope.plugin, scope.session) as txn:
            return txn.get(key, scope=_scope_name(scope))

    def set(self, scope: Scope, key: str, value: bytes, *,
            ttl: float | None = None) -> CommitReport:
        # One write committed at once: the commit checks every quota atomically, so the
        # transaction's dry run of it beforehand would only cost a second trip to storage.
        txn = self.begin(scope.plugin, scope.session)
        sid = txn._sid(_scope_name(scope))
        write = Write(check_value(value), check_ttl(ttl, self.limits))
        changes = Changes(txn.plugin_id, writes={(sid, check_key(key, self.limits)): write})
        txn.rollback()
        return self._finish(changes, {})

    def delete(self, scope: Scope, key: str) -> bool:
        with self.begin(scope.plugin, scope.session) as txn:
            return txn.delete(key, scope=_scope_name(scope))

    def keys(self, scope: Scope, prefix: str = "") -> list[str]:
        return [k for k in self._keys(scope.plugin, scope.session, self._now())
                if k.startswith(prefix)]

    def clear(self, scope: Scope) -> int:
        with self.begin(scope.plugin, scope.session) as txn:
            return txn.clear(scope=_scope_name(scope))

    def cas(self, scope: Scope, key: str, expected: bytes | None, new: bytes | None, *,
            ttl: float | None = None) -> CommitReport:
        # One compare-and-set committed at once: the commit compares the value and checks
        # the quotas atomically (after purging what expired), so a read and a dry run
        # beforehand would only decide the same thing twice.
        txn = self.begin(scope.plugin, scope.session)
        ref = (txn._sid(_scope_name(scope)), check_key(key, self.limits))
        write = Write(None if new is None else check_value(new), check_ttl(ttl, self.limits))
        changes = Changes(txn.plugin_id, writes={ref: write},
                          expect={ref: None if expected is None else check_value(expected)})
        txn.rollback()
        return self._finish(changes, {}, compared_first=True)

    def end_session(self, session_id: str, plugin_id: str | None = None) -> int:
        sid = check_id("session", session_id)
        plugins = [check_id("plugin", plugin_id)] if plugin_id is not None else self._plugins()
        count = 0
        for p in plugins:
            with self._view(p) as view:
                if view.scope_usage([sid])[sid][1] == 0:
                    continue
            count += len(self._commit(Changes(p, cleared={sid}), self._now()).deletes)
        return count

    def drop_plugin(self, plugin_id: str) -> int:
        return self._drop_plugin(check_id("plugin", plugin_id))

    def purge_expired(self) -> int:
        return self._purge(self._now(), None)

    def usage(self, scope: Scope) -> Usage:
        self._purge(self._now(), scope.plugin)
        with self._view(scope.plugin) as view:
            b, n = view.scope_usage([scope.session])[scope.session]
            return Usage(view.plugin_bytes(), b, n)

    def stats(self) -> StateStats:
        with self._stats_lock:
            return dataclasses.replace(
                self._stats, evictions_by_plugin=dict(self._stats.evictions_by_plugin))

    def records(self) -> list[Record]:
        return sorted(self._records(self._now()),
                      key=lambda r: (r.plugin, r.session is not None, r.session or "", r.key))

    def load(self, records: Iterable[Record], *, replace: bool = False) -> int:
        now = self._now()
        batches: dict[str, Changes] = {}
        for r in records:
            scope = Scope(r.plugin, r.session)
            key = check_key(r.key, self.limits)
            ttl = check_ttl(r.ttl, self.limits)
            if r.expires_at <= now:
                continue
            expires = min(r.expires_at, now + self.limits.max_ttl_seconds)
            ch = batches.setdefault(scope.plugin, Changes(scope.plugin))
            ch.writes[(scope.session, key)] = Write(check_value(r.value), ttl, expires)
        if batches:
            self._import(batches, replace, now)
        return sum(len(ch.writes) for ch in batches.values())
