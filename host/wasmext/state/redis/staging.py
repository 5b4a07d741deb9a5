"""The two halves of an atomic import into Redis that need nothing of the store's layout.

An import (`RedisStore._import`) writes each plugin's new state under temporary
keys `<plugin base>stage:<token>:...` (the same layout as the live keys, in the
plugin's hash slot), listed in the set `<prefix>:staging` before the first is
written. `SWAP` then replaces every plugin's live keys by its staged ones in one
Lua script, so a kill at any moment leaves every plugin as before or as after.
Staged keys that a killed import left are deleted by `clean_staging` when the
next import starts.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SWAP", "clean_staging"]

# The atomic swap of an import. ARGV: plugins set, staging set, then per plugin
# (id, real base, staged base, the real usage `ver` seen when staging began, "" if none).
# Everything is checked before anything is written: 0 if another host changed a plugin
# meanwhile (the import restages), -1 if a staged plugin is gone; 1 when swapped.
SWAP = """
local names = {'meta', 'exp', 'lru', 'idx', 'usage'}
for i = 3, #ARGV, 4 do
  local real, stage, ver = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  if (redis.call('HGET', real .. 'usage', 'ver') or '') ~= ver then return 0 end
  if redis.call('EXISTS', stage .. 'usage') == 0 then return -1 end
end
for i = 3, #ARGV, 4 do
  local plugin, real, stage = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  -- every entry's change counter moves, so a commit planned before the swap is stale
  for _, eid in ipairs(redis.call('ZRANGE', real .. 'idx', 0, -1)) do
    redis.call('DEL', real .. 'v:' .. eid)
    redis.call('HINCRBY', real .. 'vers', eid, 1)
  end
  for _, name in ipairs(names) do redis.call('DEL', real .. name) end
  for _, eid in ipairs(redis.call('ZRANGE', stage .. 'idx', 0, -1)) do
    if redis.call('EXISTS', stage .. 'v:' .. eid) == 1 then  -- else expired: purged later
      redis.call('RENAME', stage .. 'v:' .. eid, real .. 'v:' .. eid)
    end
    redis.call('HINCRBY', real .. 'vers', eid, 1)
  end
  for _, name in ipairs(names) do
    if redis.call('EXISTS', stage .. name) == 1 then
      redis.call('RENAME', stage .. name, real .. name)
    end
  end
  redis.call('SADD', ARGV[1], plugin)
  redis.call('SREM', ARGV[2], stage)
end
return 1
"""

def clean_staging(r: Any, staging: bytes, token: bytes | None = None) -> None:
    """Delete staged imports: those of `token`, or all that a killed import left."""
    for raw in r.smembers(staging):
        base = bytes(raw)
        if token is not None and not base.endswith(b":stage:" + token + b":"):
            continue
        # structure first: a swap that raced this cleanup then finds no staged usage
        r.delete(*(base + n for n in (b"usage", b"meta", b"exp", b"lru", b"idx")))
        pattern = re.sub(rb"([*?\[\]\\])", rb"\\\1", base) + b"v:*"
        batch = []
        for key in r.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 512:
                r.delete(*batch)
                batch = []
        if batch:
            r.delete(*batch)
        r.srem(staging, base)
