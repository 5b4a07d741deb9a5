"""The Redis backend: state shared by several hosts (Redis 6.2 or later).

Layout, per plugin `p` (the `{p}` hash tag keeps a plugin's keys in one slot):

    <prefix>:{p}:v:<eid>   the value, a string key with a native expiry (PXAT)
    <prefix>:{p}:meta      hash  eid -> "<size> <ttl>"
    <prefix>:{p}:exp       zset  eid -> expires_at (Unix seconds)
    <prefix>:{p}:lru       zset  eid -> LRU tick
    <prefix>:{p}:idx       zset  eid, all scores 0, listed by prefix (ZRANGEBYLEX)
    <prefix>:{p}:usage     hash  total, b:<scope>, n:<scope> (bytes, keys), ver
    <prefix>:plugins       set of plugin ids

    <prefix>:{p}:vers      hash  eid -> change counter (bumped by every write, delete, purge)

An eid is `g:<key>` (plugin-global) or `s<len>:<session>:<key>`. Redis expires
the values itself; Lua scripts (`scripts`) read, refresh and purge expired
entries atomically. Plain writes and deletes within every quota are one
`FAST_COMMIT` script: one round trip, decided where the data is. Any other
commit (a clear, a CAS, an eviction, a quota error or warning to report) is
optimistic: plan from a snapshot that records the versions of the entries it
read, then one `COMMIT` script checks those versions and the quotas and applies
everything, or reports the plan stale and the commit is planned again. Commits
of different sessions of one plugin do not conflict. The usage counters (bytes
and keys per scope, the plugin's total) are kept by the scripts as they change
(HINCRBY): no commit counts by scanning.

Every wait is bounded: the client's connections (`connection`) take their
socket timeouts from the calling hook's deadline.
"""

from __future__ import annotations

import functools
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, ParamSpec, TypeVar

import redis
from redis.exceptions import RedisError, WatchError

from wasmext.state.accounting import Changes, Plan, Put, Ref, Sid, plan
from wasmext.state.base import Record, StateLimits, StateUnavailable
from wasmext.state.engine import Engine
from wasmext.state.redis import scripts
from wasmext.state.redis.connection import bounded_client
from wasmext.state.redis.staging import SWAP, clean_staging

__all__ = ["RedisStore"]

P = ParamSpec("P")
T = TypeVar("T")

_EID = re.compile(rb"s(\d+):")


def _guarded(fn: Callable[P, T]) -> Callable[P, T]:
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except RedisError as exc:
            raise StateUnavailable(f"redis: {exc}") from exc
    return wrapper


def _scope(sid: Sid) -> bytes:
    if sid is None:
        return b"g:"
    raw = sid.encode("utf-8")
    return b"s%d:%s:" % (len(raw), raw)


def _eid(sid: Sid, key: str) -> bytes:
    return _scope(sid) + key.encode("utf-8")


def _parse(eid: bytes) -> Ref:
    if eid.startswith(b"g:"):
        return None, eid[2:].decode("utf-8")
    m = _EID.match(eid)
    assert m is not None, eid
    end = m.end() + int(m.group(1))
    return eid[m.end():end].decode("utf-8"), eid[end + 1:].decode("utf-8")


def _size(meta: bytes) -> int:
    return int(meta.split(b" ", 1)[0])


class _Keys:
    """The key names of one plugin."""

    def __init__(self, base: bytes) -> None:
        self.base = base
        self.meta, self.exp, self.lru, self.idx, self.usage, self.vers = (
            base + name for name in (b"meta", b"exp", b"lru", b"idx", b"usage", b"vers"))

    def purge_keys(self) -> list[bytes]:
        return [self.exp, self.lru, self.meta, self.idx, self.usage, self.vers]

    def value(self, eid: bytes) -> bytes:
        return self.base + b"v:" + eid


class _RedisView:
    def __init__(self, r: Any, k: _Keys, now: float) -> None:
        self._r, self._k, self._now = r, k, now
        self.versions: dict[bytes, bytes] = {}  # eid -> version, of every entry read
        self.whole = False  # the plan read the whole plugin (LRU order, a scope's keys)
        # What `prefetch` read in one round trip; each read below uses it when it covers
        # the question, and asks Redis otherwise.
        self._metas: dict[Ref, Any] = {}
        self._usage: dict[Sid, tuple[int, int]] = {}
        self._total: int | None = None

    def prefetch(self, ch: Changes) -> None:
        """What a plan of `ch` reads, in one round trip: the versions and sizes of the
        entries it writes (versions first, as `_versioned`), its scopes' usage and the
        plugin's total. A set then costs this and the commit script: two round trips."""
        refs = [r for r in ch.writes if r[0] not in ch.cleared]
        eids = [_eid(*r) for r in refs]
        sids = list(set(ch.cleared) | {sid for sid, _ in ch.writes})
        fields = [b"total", *(f for sid in sids
                              for f in (b"b:" + _scope(sid), b"n:" + _scope(sid)))]
        pipe = self._r.pipeline(transaction=False)
        if eids:
            pipe.hmget(self._k.vers, eids)
            pipe.hmget(self._k.meta, eids)
        pipe.hmget(self._k.usage, fields)
        got = pipe.execute()
        if eids:
            for e, v in zip(eids, got[0], strict=True):
                self.versions.setdefault(e, b"0" if v is None else bytes(v))
            self._metas = dict(zip(refs, got[1], strict=True))
        usage = got[-1]
        self._total = int(usage[0] or 0)
        self._usage = {sid: (int(usage[1 + 2 * i] or 0), int(usage[2 + 2 * i] or 0))
                       for i, sid in enumerate(sids)}

    def _versioned(self, eids: list[bytes], *reads: Callable[[Any], Any]) -> list[Any]:
        """The versions of eids and then `reads`, in one round trip (versions first: a
        change in between shows as a version mismatch at commit)."""
        pipe = self._r.pipeline(transaction=False)
        pipe.hmget(self._k.vers, eids)
        for read in reads:
            read(pipe)
        got = pipe.execute()
        for e, v in zip(eids, got[0], strict=True):
            self.versions.setdefault(e, b"0" if v is None else bytes(v))
        return list(got[1:])

    def plugin_bytes(self) -> int:
        if self._total is not None:
            return self._total
        return int(self._r.hget(self._k.usage, b"total") or 0)

    def scope_usage(self, sids: Iterable[Sid]) -> dict[Sid, tuple[int, int]]:
        sids = list(sids)
        if not sids:
            return {}
        if all(sid in self._usage for sid in sids):
            return {sid: self._usage[sid] for sid in sids}
        fields = [f for sid in sids for f in (b"b:" + _scope(sid), b"n:" + _scope(sid))]
        got = self._r.hmget(self._k.usage, fields)
        return {sid: (int(got[2 * i] or 0), int(got[2 * i + 1] or 0))
                for i, sid in enumerate(sids)}

    def sizes(self, refs: Iterable[Ref]) -> dict[Ref, int]:
        refs = list(refs)
        if refs and all(r in self._metas for r in refs):
            return {r: _size(m) for r in refs if (m := self._metas[r]) is not None}
        eids = [_eid(*r) for r in refs]
        metas = self._versioned(eids, lambda p: p.hmget(self._k.meta, eids))[0] if refs else []
        return {r: _size(m) for r, m in zip(refs, metas, strict=True) if m is not None}

    def values(self, refs: Iterable[Ref]) -> dict[Ref, bytes]:
        refs = list(refs)
        if not refs:
            return {}
        eids = [_eid(*r) for r in refs]
        scores, values = self._versioned(eids, lambda p: p.zmscore(self._k.exp, eids),
                                         lambda p: p.mget([self._k.value(e) for e in eids]))
        return {r: v for r, s, v in zip(refs, scores, values, strict=True)
                if s is not None and s > self._now and v is not None}

    def scope_sizes(self, sid: Sid) -> dict[str, int]:
        self.whole = True
        scope = _scope(sid)
        eids = self._r.zrangebylex(self._k.idx, b"[" + scope, b"(" + scope + b"\xff")
        metas = self._r.hmget(self._k.meta, eids) if eids else []
        return {_parse(e)[1]: _size(m) for e, m in zip(eids, metas, strict=True) if m is not None}

    def lru(self) -> Iterator[tuple[Ref, int]]:
        self.whole = True
        start, batch = 0, 256
        while True:
            eids = self._r.zrange(self._k.lru, start, start + batch - 1)
            if not eids:
                return
            for e, m in zip(eids, self._r.hmget(self._k.meta, eids), strict=True):
                if m is not None:
                    yield _parse(e), _size(m)
            start += batch


class RedisStore(Engine):
    """State in Redis, shared by every host that uses the same server and prefix."""

    def __init__(self, client: redis.Redis | None = None, limits: StateLimits | None = None, *,
                 url: str | None = None, prefix: str = "wasmext:state",
                 clock: Callable[[], float] = time.time, max_retries: int = 100,
                 timeout: float = 5.0) -> None:
        super().__init__(limits, clock=clock)
        if client is None:
            client = bounded_client(url or "redis://127.0.0.1:6379/0", timeout)
        if client.get_connection_kwargs().get("decode_responses"):
            raise ValueError("RedisStore needs a client with decode_responses=False")
        # Any: responses are bytes (decode_responses=False), which redis-py's types cannot say.
        self._r: Any = client
        self._prefix = prefix.encode("utf-8")
        self._retries = max_retries
        self._get = client.register_script(scripts.GET)
        self._touch_script = client.register_script(scripts.TOUCH)
        self._purge_script = client.register_script(scripts.PURGE)
        self._commit_script = client.register_script(scripts.COMMIT)
        self._fast_script = client.register_script(scripts.FAST_COMMIT)
        self._usage = client.register_script(scripts.USAGE)
        self._swap = client.register_script(SWAP)
        self._staging = self._prefix + b":staging"  # set of staged imports' key bases

    def _after_fork(self) -> None:
        """In a forked child: redis-py's pool connects again by itself, but first takes
        its own lock, which a parent thread taking or returning a connection at the fork
        holds for good there (the child waited for ever, one fork in about 300 of a busy
        store). The pool starts afresh, with locks of its own."""
        super()._after_fork()
        pool = getattr(self._r, "connection_pool", None)
        if pool is not None and hasattr(pool, "_lock") and hasattr(pool, "_fork_lock"):
            pool._fork_lock = threading.RLock()
            pool._lock = threading.RLock()
            pool.reset()  # the parent's connections dropped, never shut down (redis-py)

    def _k(self, plugin: str) -> _Keys:
        return _Keys(self._prefix + b":{" + plugin.encode("utf-8") + b"}:")

    @_guarded
    def _read(self, plugin: str, sid: Sid, key: str, now: float) -> bytes | None:
        k, eid = self._k(plugin), _eid(sid, key)
        value = self._get(keys=[k.exp, k.value(eid)], args=[eid, repr(now)])
        return None if value is None else bytes(value)

    @_guarded
    def _keys(self, plugin: str, sid: Sid, now: float) -> list[str]:
        k, scope = self._k(plugin), _scope(sid)
        eids = self._r.zrangebylex(k.idx, b"[" + scope, b"(" + scope + b"\xff")
        if not eids:
            return []
        scores = self._r.zmscore(k.exp, eids)
        return sorted(_parse(bytes(e))[1] for e, s in zip(eids, scores, strict=True)
                      if s is not None and s > now)

    @_guarded
    def _touch(self, plugin: str, refs: list[Ref], now: float) -> None:
        k, eids = self._k(plugin), [_eid(*r) for r in refs]
        tick = self._ticker.take(len(refs), now)
        self._touch_script(keys=[k.exp, k.lru, k.meta, *(k.value(e) for e in eids)],
                           args=[repr(now), str(tick), *eids])

    @contextmanager
    def _view(self, plugin: str) -> Iterator[_RedisView]:
        try:
            yield _RedisView(self._r, self._k(plugin), self._now())
        except RedisError as exc:
            raise StateUnavailable(f"redis: {exc}") from exc

    def _fast(self, changes: Changes, now: float) -> Plan | None:
        """Plain writes within every quota, decided and applied by one script (one round
        trip); None when the commit needs a plan (a clear, a CAS, an eviction, a quota
        error or a warning to report), having changed nothing."""
        if changes.cleared or changes.expect:
            return None
        k, lim, p = self._k(changes.plugin), self.limits, changes.plugin
        puts: list[Put] = []
        args: list[bytes | str | int] = [
            repr(now), k.value(b""), p, lim.max_plugin_bytes, lim.max_session_bytes,
            lim.max_keys, repr(lim.session_warn_ratio * lim.max_session_bytes),
            len(changes.writes)]
        tick = self._ticker.take(sum(w.value is not None for w in changes.writes.values()), now)
        for (sid, key), w in changes.writes.items():
            if w.expires_at is not None:  # an import's explicit expiry: the planned path
                return None
            scope = _scope(sid)
            eid = scope + key.encode("utf-8")
            session = 0 if sid is None else 1
            if w.value is None:
                args += [eid, scope, session, 0, b"", 0, b"", 0, 0, 0]
                continue
            size, expires = lim.entry_size(key, w.value), now + w.ttl
            args += [eid, scope, session, 1, w.value, size, f"{size} {w.ttl!r}",
                     repr(expires), max(1, int(expires * 1000) + 1), tick + len(puts)]
            puts.append(Put(sid, key, w.value, size, w.ttl, expires))
        if not self._fast_script(keys=[*k.purge_keys(), self._prefix + b":plugins"], args=args):
            return None
        return Plan(puts=puts)

    @_guarded
    def _commit(self, changes: Changes, now: float) -> Plan:
        fast = self._fast(changes, now)
        if fast is not None:
            return fast
        p, k = changes.plugin, self._k(changes.plugin)
        whole = bool(changes.cleared)  # the plan will depend on the whole plugin
        for _ in range(self._retries):
            view = _RedisView(self._r, k, now)
            ver = bytes(self._r.hget(k.usage, b"ver") or b"0") if whole else b""
            view.prefetch(changes)
            done = plan(view, changes, now, self.limits)
            if view.whole and not whole:
                whole = True
                continue  # plan again, this time against a known usage version
            if self._commit_script(keys=[*k.purge_keys(), self._prefix + b":plugins"],
                                   args=self._args(k, p, done, now, view, ver)):
                return done
        raise StateUnavailable(f"plugin {p}: state commit gave up after {self._retries}"
                               " conflicting commits of other hosts", plugin_id=p)

    def _args(self, k: _Keys, plugin: str, done: Plan, now: float, view: _RedisView,
              ver: bytes) -> list[bytes | str | int]:
        lim = self.limits
        args: list[bytes | str | int] = [
            repr(now), k.value(b""), plugin, ver,
            lim.max_plugin_bytes, lim.max_session_bytes, lim.max_keys, len(view.versions)]
        for eid, v in view.versions.items():
            args += [eid, v]
        args.append(len(done.deletes))
        args += [_eid(*r) for r in done.deletes]
        args.append(len(done.puts))
        tick = self._ticker.take(len(done.puts), now)
        for i, put in enumerate(done.puts):
            args += [_eid(put.sid, put.key), put.value, f"{put.size} {put.ttl!r}",
                     repr(put.expires_at), max(1, int(put.expires_at * 1000) + 1), tick + i]
        args.append(len(done.deltas))
        for sid, (db, dn) in done.deltas.items():
            args += [_scope(sid), db, dn, 0 if sid is None else 1]
        return args

    def _purge_one(self, k: _Keys, now: float) -> int:
        return int(self._purge_script(keys=k.purge_keys(), args=[repr(now), k.value(b"")]))

    @_guarded
    def _purge(self, now: float, plugin: str | None) -> int:
        plugins = [plugin] if plugin is not None else self._plugins()
        return sum(self._purge_one(self._k(p), now) for p in plugins)

    @_guarded
    def _plugins(self) -> list[str]:
        return sorted(bytes(p).decode("utf-8")
                      for p in self._r.smembers(self._prefix + b":plugins"))

    @_guarded
    def _drop_plugin(self, plugin: str) -> int:
        k = self._k(plugin)
        with self._r.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(k.usage)
                    eids = pipe.zrange(k.idx, 0, -1)
                    pipe.multi()
                    for i in range(0, len(eids), 512):
                        pipe.delete(*(k.value(bytes(e)) for e in eids[i:i + 512]))
                    for e in eids:
                        pipe.hincrby(k.vers, e, 1)
                    pipe.delete(k.meta, k.exp, k.lru, k.idx, k.usage)
                    pipe.srem(self._prefix + b":plugins", plugin)
                    pipe.execute()
                    return len(eids)
                except WatchError:
                    continue

    @_guarded
    def _records(self, now: float) -> list[Record]:
        out = []
        for p in self._plugins():
            k = self._k(p)
            metas = self._r.hgetall(k.meta)
            exps = dict(self._r.zrange(k.exp, 0, -1, withscores=True))
            eids = [bytes(e) for e in metas]
            values = self._r.mget([k.value(e) for e in eids]) if eids else []
            for eid, value in zip(eids, values, strict=True):
                exp = exps.get(eid)
                if value is not None and exp is not None and exp > now:
                    sid, key = _parse(eid)
                    ttl = float(bytes(metas[eid]).split(b" ", 1)[1])
                    out.append(Record(p, sid, key, bytes(value), float(exp), ttl))
        return out

    # -- import: stage every plugin under temporary keys, then one atomic swap -----------

    @_guarded
    def _import(self, batches: dict[str, Changes], replace: bool, now: float) -> None:
        clean_staging(self._r, self._staging)
        for _ in range(self._retries):
            token = uuid.uuid4().hex.encode("ascii")
            args: list[bytes] = [self._prefix + b":plugins", self._staging]
            try:
                for p, ch in batches.items():
                    stage, ver = self._stage(p, ch, replace, now, token)
                    args += [p.encode("utf-8"), self._k(p).base, stage.base, ver]
                if int(self._swap(args=args)) == 1:
                    return
            except BaseException:
                with suppress(RedisError):  # else the next import cleans it
                    clean_staging(self._r, self._staging, token)
                raise
            clean_staging(self._r, self._staging, token)  # another host committed: restage
        raise StateUnavailable(f"state import gave up after {self._retries} conflicting"
                               " commits of other hosts")

    def _stage(self, plugin: str, ch: Changes, replace: bool, now: float,
               token: bytes) -> tuple[_Keys, bytes]:
        """The plugin's new state under `<base>stage:<token>:`; the `ver` it was made from."""
        real = self._k(plugin)
        stage = _Keys(real.base + b"stage:" + token + b":")
        self._r.sadd(self._staging, stage.base)  # listed before it exists: never orphaned
        if not replace:
            self._purge_one(real, now)
        ver = bytes(self._r.hget(real.usage, b"ver") or b"")
        if not replace:
            eids = [bytes(e) for e in self._r.zrange(real.idx, 0, -1)]
            with self._r.pipeline(transaction=False) as pipe:
                for eid in eids:
                    pipe.copy(real.value(eid), stage.value(eid))
                for name in (b"meta", b"exp", b"lru", b"idx", b"usage"):
                    pipe.copy(real.base + name, stage.base + name)
                pipe.execute()
        done = plan(_RedisView(self._r, stage, now), ch, now, self.limits)
        with self._r.pipeline() as pipe:
            gone = [_eid(*r) for r in done.deletes]
            if gone:
                pipe.delete(*(stage.value(e) for e in gone))
                for zset in (stage.exp, stage.lru, stage.idx):
                    pipe.zrem(zset, *gone)
                pipe.hdel(stage.meta, *gone)
            tick = self._ticker.take(len(done.puts), now)
            for i, put in enumerate(done.puts):
                eid = _eid(put.sid, put.key)
                pipe.set(stage.value(eid), put.value, pxat=max(1, int(put.expires_at * 1000) + 1))
                pipe.hset(stage.meta, eid, f"{put.size} {put.ttl!r}")
                pipe.zadd(stage.exp, {eid: put.expires_at})
                pipe.zadd(stage.lru, {eid: tick + i})
                pipe.zadd(stage.idx, {eid: 0})
            args: list[bytes | int] = [b"total", sum(b for b, _ in done.deltas.values()),
                                       b"ver", 1]
            for sid, (db, dn) in done.deltas.items():
                args += [b"b:" + _scope(sid), db, b"n:" + _scope(sid), dn]
            self._usage(keys=[stage.usage], args=args, client=pipe)
            pipe.execute()
        return stage, ver

    def close(self) -> None:
        self._r.close()
