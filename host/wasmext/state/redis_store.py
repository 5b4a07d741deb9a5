"""The Redis backend: state shared by several hosts (Redis 6.2 or later).

Layout, per plugin `p` (the `{p}` hash tag keeps a plugin's keys in one slot):

    <prefix>:{p}:v:<eid>   the value, a string key with a native expiry (PXAT)
    <prefix>:{p}:meta      hash  eid -> "<size> <ttl>"
    <prefix>:{p}:exp       zset  eid -> expires_at (Unix seconds)
    <prefix>:{p}:lru       zset  eid -> LRU tick
    <prefix>:{p}:idx       zset  eid, all scores 0, listed by prefix (ZRANGEBYLEX)
    <prefix>:{p}:usage     hash  total, b:<scope>, n:<scope> (bytes, keys), ver
    <prefix>:plugins       set of plugin ids

An eid is `g:<key>` (plugin-global) or `s<len>:<session>:<key>`. Redis expires
the values itself; Lua scripts read, refresh and purge expired entries
atomically, and a commit is optimistic: WATCH the plugin's usage hash (which
every commit, purge and drop changes), plan, then MULTI/EXEC, retrying when
another host committed in between.
"""

from __future__ import annotations

import functools
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, ParamSpec, TypeVar

import redis
from redis.exceptions import RedisError, WatchError

from wasmext.state.accounting import Changes, Plan, Ref, Sid, plan
from wasmext.state.base import Record, StateLimits, StateUnavailable
from wasmext.state.engine import Engine
from wasmext.state.redis_staging import SWAP, clean_staging

__all__ = ["RedisStore"]

P = ParamSpec("P")
T = TypeVar("T")

_GET = """
local e = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not e) or tonumber(e) <= tonumber(ARGV[2]) then return false end
return redis.call('GET', KEYS[2])
"""
_TOUCH = """
local now, tick = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = 3, #ARGV do
  local e = redis.call('ZSCORE', KEYS[1], ARGV[i])
  local meta = redis.call('HGET', KEYS[3], ARGV[i])
  if e and meta and tonumber(e) > now then
    local exp = now + tonumber(string.match(meta, ' (.*)$'))
    redis.call('ZADD', KEYS[1], string.format('%.17g', exp), ARGV[i])
    redis.call('ZADD', KEYS[2], string.format('%.17g', tick), ARGV[i])
    redis.call('PEXPIREAT', KEYS[i + 1], string.format('%d', math.ceil(exp * 1000)))
    tick = tick + 1
  end
end
return 0
"""
_PURGE = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local total = 0
for _, eid in ipairs(ids) do
  local meta = redis.call('HGET', KEYS[3], eid)
  local size = meta and tonumber(string.match(meta, '^(%d+)')) or 0
  local scope = 'g:'
  if string.sub(eid, 1, 1) == 's' then
    local n = string.match(eid, '^s(%d+):')
    scope = string.sub(eid, 1, #n + 3 + tonumber(n))
  end
  redis.call('DEL', ARGV[2] .. eid)
  for _, k in ipairs({KEYS[1], KEYS[2], KEYS[4]}) do redis.call('ZREM', k, eid) end
  redis.call('HDEL', KEYS[3], eid)
  for field, d in pairs({['b:' .. scope] = -size, ['n:' .. scope] = -1}) do
    if redis.call('HINCRBY', KEYS[5], field, d) <= 0 then redis.call('HDEL', KEYS[5], field) end
  end
  total = total + size
end
if #ids > 0 then
  redis.call('HINCRBY', KEYS[5], 'total', -total)
  redis.call('HINCRBY', KEYS[5], 'ver', 1)
end
return #ids
"""
_USAGE = """
for i = 1, #ARGV, 2 do
  local v = redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  if v <= 0 and string.sub(ARGV[i], 2, 2) == ':' then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return 0
"""
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
        self.meta, self.exp, self.lru, self.idx, self.usage = (
            base + name for name in (b"meta", b"exp", b"lru", b"idx", b"usage"))

    def value(self, eid: bytes) -> bytes:
        return self.base + b"v:" + eid


class _RedisView:
    def __init__(self, r: Any, k: _Keys, now: float) -> None:
        self._r, self._k, self._now = r, k, now

    def plugin_bytes(self) -> int:
        return int(self._r.hget(self._k.usage, b"total") or 0)

    def scope_usage(self, sids: Iterable[Sid]) -> dict[Sid, tuple[int, int]]:
        sids = list(sids)
        if not sids:
            return {}
        fields = [f for sid in sids for f in (b"b:" + _scope(sid), b"n:" + _scope(sid))]
        got = self._r.hmget(self._k.usage, fields)
        return {sid: (int(got[2 * i] or 0), int(got[2 * i + 1] or 0))
                for i, sid in enumerate(sids)}

    def sizes(self, refs: Iterable[Ref]) -> dict[Ref, int]:
        refs = list(refs)
        metas = self._r.hmget(self._k.meta, [_eid(*r) for r in refs]) if refs else []
        return {r: _size(m) for r, m in zip(refs, metas, strict=True) if m is not None}

    def values(self, refs: Iterable[Ref]) -> dict[Ref, bytes]:
        refs = list(refs)
        if not refs:
            return {}
        eids = [_eid(*r) for r in refs]
        scores = self._r.zmscore(self._k.exp, eids)
        values = self._r.mget([self._k.value(e) for e in eids])
        return {r: v for r, s, v in zip(refs, scores, values, strict=True)
                if s is not None and s > self._now and v is not None}

    def scope_sizes(self, sid: Sid) -> dict[str, int]:
        scope = _scope(sid)
        eids = self._r.zrangebylex(self._k.idx, b"[" + scope, b"(" + scope + b"\xff")
        metas = self._r.hmget(self._k.meta, eids) if eids else []
        return {_parse(e)[1]: _size(m) for e, m in zip(eids, metas, strict=True) if m is not None}

    def lru(self) -> Iterator[tuple[Ref, int]]:
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
                 clock: Callable[[], float] = time.time, max_retries: int = 100) -> None:
        super().__init__(limits, clock=clock)
        if client is None:
            client = redis.Redis.from_url(url or "redis://127.0.0.1:6379/0")
        if client.get_connection_kwargs().get("decode_responses"):
            raise ValueError("RedisStore needs a client with decode_responses=False")
        # Any: responses are bytes (decode_responses=False), which redis-py's types cannot say.
        self._r: Any = client
        self._prefix = prefix.encode("utf-8")
        self._retries = max_retries
        self._get = client.register_script(_GET)
        self._touch_script = client.register_script(_TOUCH)
        self._purge_script = client.register_script(_PURGE)
        self._usage = client.register_script(_USAGE)
        self._swap = client.register_script(SWAP)
        self._staging = self._prefix + b":staging"  # set of staged imports' key bases

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

    @_guarded
    def _commit(self, changes: Changes, now: float) -> Plan:
        p, k = changes.plugin, self._k(changes.plugin)
        self._purge_one(k, now)
        for _ in range(self._retries):
            with self._r.pipeline() as pipe:
                try:
                    pipe.watch(k.usage)
                    done = plan(_RedisView(pipe, k, now), changes, now, self.limits)
                    pipe.multi()
                    self._apply(pipe, k, p, done, now)
                    pipe.execute()
                    return done
                except WatchError:
                    continue
        raise StateUnavailable(f"plugin {p}: state commit gave up after {self._retries}"
                               " conflicting commits of other hosts", plugin_id=p)

    def _apply(self, pipe: Any, k: _Keys, plugin: str, done: Plan, now: float) -> None:
        gone = [_eid(*r) for r in done.deletes]
        if gone:
            pipe.delete(*(k.value(e) for e in gone))
            for zset in (k.exp, k.lru, k.idx):
                pipe.zrem(zset, *gone)
            pipe.hdel(k.meta, *gone)
        tick = self._ticker.take(len(done.puts), now)
        for i, put in enumerate(done.puts):
            eid = _eid(put.sid, put.key)
            pipe.set(k.value(eid), put.value, pxat=max(1, int(put.expires_at * 1000) + 1))
            pipe.hset(k.meta, eid, f"{put.size} {put.ttl!r}")
            pipe.zadd(k.exp, {eid: put.expires_at})
            pipe.zadd(k.lru, {eid: tick + i})
            pipe.zadd(k.idx, {eid: 0})
        args: list[bytes | int] = [b"total", sum(b for b, _ in done.deltas.values()), b"ver", 1]
        for sid, (db, dn) in done.deltas.items():
            args += [b"b:" + _scope(sid), db, b"n:" + _scope(sid), dn]
        self._usage(keys=[k.usage], args=args, client=pipe)
        pipe.sadd(self._prefix + b":plugins", plugin)

    def _purge_one(self, k: _Keys, now: float) -> int:
        return int(self._purge_script(keys=[k.exp, k.lru, k.meta, k.idx, k.usage],
                                      args=[repr(now), k.value(b"")]))

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
