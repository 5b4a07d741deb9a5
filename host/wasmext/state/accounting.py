"""What every backend shares: validation, quota checks, LRU eviction, transactions.

A backend implements a few primitives (read, list, touch, commit a `Changes`
inside its own atomic section, purge); `plan()` decides, from a `View` of one
plugin's stored entries, what a commit deletes, writes and evicts, or which
limit it breaks. The backend applies the plan; so all backends agree on
every quota, eviction and error by construction.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from wasmext.state.base import (
    CasConflict,
    InvalidArgument,
    InvalidKey,
    KeyTooLong,
    QuotaExceeded,
    SessionQuotaExceeded,
    StateLimits,
    TooManyKeys,
)

__all__ = ["Changes", "Plan", "Put", "Ref", "View", "Write", "check_key", "check_ttl",
           "check_value", "plan"]

log = logging.getLogger("wasmext.state")

Sid = str | None  # a session id, None for the plugin-global scope
Ref = tuple[Sid, str]  # (session, key) inside one plugin


def check_key(key: object, limits: StateLimits) -> str:
    """Return the key if it is a non-empty UTF-8 string without NUL within the key limit."""
    if not isinstance(key, str) or not key or "\x00" in key:
        raise InvalidKey(f"state key must be a non-empty string without NUL, got {key!r}")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidKey(f"state key {key!r} is not valid UTF-8") from None
    if size > limits.max_key_bytes:
        raise KeyTooLong(f"state key is {size} bytes, over the limit of {limits.max_key_bytes}"
                         " (max_key_bytes)")
    return key


def check_value(value: object) -> bytes:
    """Return the value as bytes (from bytes, bytearray or memoryview)."""
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if not isinstance(value, bytes):
        raise InvalidArgument(f"state values are bytes, got {type(value).__name__}")
    return value


def check_ttl(ttl: object, limits: StateLimits) -> float:
    """Return the TTL in seconds: the default for None, else a number in (0, max]."""
    if ttl is None:
        return limits.ttl_seconds
    if (not isinstance(ttl, (int, float)) or isinstance(ttl, bool)
            or not 0 < ttl <= limits.max_ttl_seconds):
        raise InvalidArgument(f"ttl must be a number of seconds in (0, {limits.max_ttl_seconds}],"
                              f" got {ttl!r}")
    return float(ttl)


@dataclass
class Write:
    """One staged write of a key: a value, or None to delete, with its TTL."""

    value: bytes | None  # None: delete
    ttl: float
    expires_at: float | None = None  # explicit (import); otherwise commit time + ttl


@dataclass
class Changes:
    """The pending writes of one plugin, applied in this order: clears, then writes."""

    plugin: str
    cleared: set[Sid] = field(default_factory=set)
    writes: dict[Ref, Write] = field(default_factory=dict)
    expect: dict[Ref, bytes | None] = field(default_factory=dict)  # CAS preconditions

    def __bool__(self) -> bool:
        return bool(self.cleared or self.writes or self.expect)


class View(Protocol):
    """One plugin's stored, unexpired entries, as a backend shows them to `plan`."""

    def plugin_bytes(self) -> int:
        """Bytes the plugin holds in every scope."""
        ...
    def scope_usage(self, sids: Iterable[Sid]) -> dict[Sid, tuple[int, int]]:
        """Bytes and key count of each scope."""
        ...  # bytes, keys
    def sizes(self, refs: Iterable[Ref]) -> dict[Ref, int]:
        """Stored size of each ref that exists."""
        ...  # only refs that exist
    def values(self, refs: Iterable[Ref]) -> dict[Ref, bytes]:
        """Stored value of each ref that exists."""
        ...  # only refs that exist
    def scope_sizes(self, sid: Sid) -> dict[str, int]:
        """Size of each key of the scope."""
        ...  # key -> size
    def lru(self) -> Iterator[tuple[Ref, int]]:
        """The plugin's entries with their sizes, least recently used first."""
        ...  # oldest first


@dataclass(frozen=True)
class Put:
    """A write the plan applies: the value, its size and when it expires."""

    sid: Sid
    key: str
    value: bytes
    size: int
    ttl: float
    expires_at: float


@dataclass
class Plan:
    """What a commit does: deletes, then puts, the usage deltas and the evictions."""

    deletes: dict[Ref, int] = field(default_factory=dict)  # apply before puts
    puts: list[Put] = field(default_factory=list)
    deltas: dict[Sid, tuple[int, int]] = field(default_factory=dict)  # bytes, keys
    evicted: list[tuple[Ref, int]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _where(plugin: str, sid: Sid) -> str:
    return f"plugin {plugin} " + (f"session {sid}" if sid is not None else "global scope")


def plan(view: View, ch: Changes, now: float, limits: StateLimits, *,
         dry_run: bool = False) -> Plan:
    """Decide a commit. Raises CasConflict or a QuotaExceeded; `dry_run` skips eviction."""
    p = ch.plugin
    if ch.expect and not dry_run:
        current = view.values(ch.expect)
        for ref, expected in ch.expect.items():
            if current.get(ref) != expected:
                raise CasConflict(f"{_where(p, ref[0])}: key {ref[1]!r} changed since it was"
                                  " compared", plugin_id=p)
    out = Plan()
    sids = set(ch.cleared) | {sid for sid, _ in ch.writes}
    before = view.scope_usage(sids)
    delta = {sid: [0, 0] for sid in sids}
    for sid in ch.cleared:
        for key, size in view.scope_sizes(sid).items():
            out.deletes[(sid, key)] = size
        delta[sid] = [-before[sid][0], -before[sid][1]]
    old = view.sizes(ref for ref in ch.writes if ref[0] not in ch.cleared)
    for ref, w in ch.writes.items():
        sid, key = ref
        d = delta[sid]
        prev = old.get(ref)
        if prev is not None:
            d[0] -= prev
            d[1] -= 1
        if w.value is None:
            if prev is not None:
                out.deletes[ref] = prev
            continue
        size = limits.entry_size(key, w.value)
        d[0] += size
        d[1] += 1
        expires = w.expires_at if w.expires_at is not None else now + w.ttl
        out.puts.append(Put(sid, key, w.value, size, w.ttl, expires))
    for sid in sorted(sids, key=lambda s: (s is not None, s or "")):
        (b0, n0), (db, dn) = before[sid], delta[sid]
        if n0 + dn > limits.max_keys and dn > 0:
            raise TooManyKeys(f"{_where(p, sid)} would hold {n0 + dn} keys, over the limit of"
                              f" {limits.max_keys} (max_keys)", plugin_id=p)
        if sid is not None and b0 + db > limits.max_session_bytes and db > 0:
            raise SessionQuotaExceeded(
                f"{_where(p, sid)} would use {b0 + db} bytes, over the limit of"
                f" {limits.max_session_bytes} (max_session_bytes)", plugin_id=p)
    pinned = sum(put.size for put in out.puts)
    if pinned > limits.max_plugin_bytes:
        raise QuotaExceeded(f"plugin {p}: this commit alone writes {pinned} bytes, over the"
                            f" plugin limit of {limits.max_plugin_bytes} (max_plugin_bytes)",
                            plugin_id=p)
    out.deltas = {sid: (d[0], d[1]) for sid, d in delta.items()}
    if dry_run:
        return out
    need = view.plugin_bytes() + sum(d[0] for d in delta.values()) - limits.max_plugin_bytes
    if need > 0:
        for ref, size in view.lru():
            if ref in ch.writes or ref in out.deletes or ref[0] in ch.cleared:
                continue
            out.deletes[ref] = size
            out.evicted.append((ref, size))
            db, dn = out.deltas.get(ref[0], (0, 0))
            out.deltas[ref[0]] = (db - size, dn - 1)
            need -= size
            if need <= 0:
                break
        if need > 0:  # the view and the usage counters disagree: refuse rather than overrun
            raise QuotaExceeded(f"plugin {p}: cannot free {need} bytes", plugin_id=p)
    warn_at = limits.session_warn_ratio * limits.max_session_bytes
    for sid in sorted(s for s in sids if s is not None):
        b0, b1 = before[sid][0], before[sid][0] + delta[sid][0]
        if b0 < warn_at <= b1:
            out.warnings.append(f"{_where(p, sid)} uses {b1} of {limits.max_session_bytes}"
                                f" bytes ({100 * b1 // max(1, limits.max_session_bytes)}%)")
    return out


class Ticker:
    """Strictly increasing LRU ticks, close to microseconds of the clock (so that
    several processes sharing one store order their accesses roughly in time)."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def take(self, n: int, now: float) -> int:
        """Reserve n consecutive ticks; the first."""
        with self._lock:
            first = max(self._last + 1, int(now * 1_000_000))
            self._last = first + max(n, 1) - 1
            return first

    def copy(self) -> Ticker:
        """A ticker (with a lock of its own) that goes on from this one's last tick."""
        fresh = Ticker()
        fresh._last = self._last
        return fresh

    def seen(self, tick: int) -> None:
        """Never hand out a tick at or below one already stored."""
        with self._lock:
            self._last = max(self._last, tick)

