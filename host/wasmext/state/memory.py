"""The in-memory backend: for tests and for hosts that keep no state across restarts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from wasmext.forks import quiesce_at_fork
from wasmext.state.accounting import Changes, Plan, Ref, Sid, plan
from wasmext.state.base import Record, StateLimits
from wasmext.state.engine import Engine, LockedAcrossFork

__all__ = ["MemoryStore"]


@dataclass
class _Entry:
    value: bytes
    size: int
    ttl: float
    expires_at: float
    tick: int


class _MemoryView:
    def __init__(self, entries: dict[Ref, _Entry]) -> None:
        self._entries = entries

    def plugin_bytes(self) -> int:
        return sum(e.size for e in self._entries.values())

    def scope_usage(self, sids: Iterable[Sid]) -> dict[Sid, tuple[int, int]]:
        out = {sid: (0, 0) for sid in sids}
        for (sid, _), e in self._entries.items():
            if sid in out:
                b, n = out[sid]
                out[sid] = (b + e.size, n + 1)
        return out

    def sizes(self, refs: Iterable[Ref]) -> dict[Ref, int]:
        return {r: self._entries[r].size for r in refs if r in self._entries}

    def values(self, refs: Iterable[Ref]) -> dict[Ref, bytes]:
        return {r: self._entries[r].value for r in refs if r in self._entries}

    def scope_sizes(self, sid: Sid) -> dict[str, int]:
        return {k: e.size for (s, k), e in self._entries.items() if s == sid}

    def lru(self) -> Iterator[tuple[Ref, int]]:
        for ref, e in sorted(self._entries.items(), key=lambda item: item[1].tick):
            yield ref, e.size


class MemoryStore(LockedAcrossFork, Engine):
    """Everything in a dict, under one lock; gone when the process ends."""

    process_local = True

    def __init__(self, limits: StateLimits | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(limits, clock=clock)
        self._data: dict[str, dict[Ref, _Entry]] = {}
        self._lock = threading.RLock()
        self._quiet_at_fork = False
        quiesce_at_fork(self)

    def _after_fork(self) -> None:
        """In a forked child: a copy of the parent's state, the child's own from now on."""
        super()._after_fork()
        self._quiet_at_fork = False
        self._lock = threading.RLock()

    def _live(self, plugin: str, ref: Ref, now: float) -> _Entry | None:
        e = self._data.get(plugin, {}).get(ref)
        return e if e is not None and e.expires_at > now else None

    def _read(self, plugin: str, sid: Sid, key: str, now: float) -> bytes | None:
        with self._lock:
            e = self._live(plugin, (sid, key), now)
            return None if e is None else e.value

    def _keys(self, plugin: str, sid: Sid, now: float) -> list[str]:
        with self._lock:
            return sorted(k for (s, k), e in self._data.get(plugin, {}).items()
                          if s == sid and e.expires_at > now)

    def _touch(self, plugin: str, refs: list[Ref], now: float) -> None:
        with self._lock:
            tick = self._ticker.take(len(refs), now)
            for ref in refs:
                e = self._live(plugin, ref, now)
                if e is not None:
                    e.expires_at = now + e.ttl
                    e.tick = tick
                    tick += 1

    @contextmanager
    def _view(self, plugin: str) -> Iterator[_MemoryView]:
        with self._lock:
            yield _MemoryView(self._data.get(plugin, {}))

    def _commit(self, changes: Changes, now: float) -> Plan:
        with self._lock:
            self._purge(now, changes.plugin)
            entries = self._data.setdefault(changes.plugin, {})
            done = self._apply(entries, changes, now)
            if not entries:
                del self._data[changes.plugin]
            return done

    def _apply(self, entries: dict[Ref, _Entry], changes: Changes, now: float) -> Plan:
        """Plan `changes` against `entries` and write them there (the lock is held)."""
        done = plan(_MemoryView(entries), changes, now, self.limits)
        for ref in done.deletes:
            del entries[ref]
        tick = self._ticker.take(len(done.puts), now)
        for i, put in enumerate(done.puts):
            entries[(put.sid, put.key)] = _Entry(put.value, put.size, put.ttl,
                                                 put.expires_at, tick + i)
        return done

    def _purge(self, now: float, plugin: str | None) -> int:
        count = 0
        with self._lock:
            for p in [plugin] if plugin is not None else list(self._data):
                entries = self._data.get(p, {})
                dead = [ref for ref, e in entries.items() if e.expires_at <= now]
                for ref in dead:
                    del entries[ref]
                count += len(dead)
                if p in self._data and not entries:
                    del self._data[p]
        return count

    def _plugins(self) -> list[str]:
        with self._lock:
            return sorted(self._data)

    def _drop_plugin(self, plugin: str) -> int:
        with self._lock:
            return len(self._data.pop(plugin, {}))

    def _records(self, now: float) -> list[Record]:
        with self._lock:
            return [Record(p, sid, key, e.value, e.expires_at, e.ttl)
                    for p, entries in self._data.items()
                    for (sid, key), e in entries.items() if e.expires_at > now]

    def _import(self, batches: dict[str, Changes], replace: bool, now: float) -> None:
        with self._lock:  # plan every plugin on copies, then swap them all in
            staged: dict[str, dict[Ref, _Entry]] = {}
            for p, ch in batches.items():
                entries = {} if replace else {ref: e for ref, e in self._data.get(p, {}).items()
                                              if e.expires_at > now}
                self._apply(entries, ch, now)
                staged[p] = entries
            for p, entries in staged.items():
                if entries:
                    self._data[p] = entries
                else:
                    self._data.pop(p, None)

    def close(self) -> None:
        pass
