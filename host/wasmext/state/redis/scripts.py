"""The Lua scripts of the Redis backend (see `store` for the key layout).

Every change of an entry (a commit's write or delete, a purge, a drop) bumps its
counter in the plugin's `vers` hash. A commit is planned from a snapshot and
sent as one `_COMMIT` script (one round trip, atomic): it purges expired
entries, checks that every entry the plan read still has the version it had,
re-checks the quotas against the current usage counters, and only then applies
the writes and the accounting. So commits of one plugin conflict only when they
touched the same entries, or when a plan depended on the whole plugin (an
eviction, a cleared scope: then the usage hash's `ver` must be unchanged).

Most commits need no plan from outside: plain writes and deletes that stay
within every quota. `FAST_COMMIT` decides and applies those itself, in the one
round trip of the script: it reads each entry's old size and the scopes' usage
counters where it stands (no snapshot, so nothing can go stale), and answers 0
without changing anything when the commit needs more than that (an eviction, a
quota error to report, a warning to log): the caller then plans it the long way.
"""

from __future__ import annotations

__all__ = ["COMMIT", "FAST_COMMIT", "GET", "PURGE", "TOUCH", "USAGE"]

GET = """
local e = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not e) or tonumber(e) <= tonumber(ARGV[2]) then return false end
return redis.call('GET', KEYS[2])
"""
TOUCH = """
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
# KEYS: exp lru meta idx usage vers; purge(now, value key prefix)
_PURGE_FN = """
local function purge(now, vprefix)
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
  local total = 0
  for _, eid in ipairs(ids) do
    local meta = redis.call('HGET', KEYS[3], eid)
    local size = meta and tonumber(string.match(meta, '^(%d+)')) or 0
    local scope = 'g:'
    if string.sub(eid, 1, 1) == 's' then
      local n = string.match(eid, '^s(%d+):')
      scope = string.sub(eid, 1, #n + 3 + tonumber(n))
    end
    redis.call('DEL', vprefix .. eid)
    for _, k in ipairs({KEYS[1], KEYS[2], KEYS[4]}) do redis.call('ZREM', k, eid) end
    redis.call('HDEL', KEYS[3], eid)
    redis.call('HINCRBY', KEYS[6], eid, 1)
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
end
"""
PURGE = _PURGE_FN + "return purge(ARGV[1], ARGV[2])\n"
USAGE = """
for i = 1, #ARGV, 2 do
  local v = redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  if v <= 0 and string.sub(ARGV[i], 2, 2) == ':' then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return 0
"""
# KEYS: exp lru meta idx usage vers plugins
# ARGV: now vprefix plugin global_ver('' = unchecked) max_plugin max_session max_keys
#       nver {eid ver} ndel {eid} nput {eid value meta expires pxat tick}
#       nscope {scope db dn is_session}
# Returns 1 when applied, 0 when the plan is stale (plan again).
COMMIT = _PURGE_FN + """
local now, vprefix = ARGV[1], ARGV[2]
purge(now, vprefix)
local usage, vers = KEYS[5], KEYS[6]
if ARGV[4] ~= '' and (redis.call('HGET', usage, 'ver') or '0') ~= ARGV[4] then return 0 end
local i = 8
local n = tonumber(ARGV[i])
for j = 1, n do
  if (redis.call('HGET', vers, ARGV[i + 2 * j - 1]) or '0') ~= ARGV[i + 2 * j] then return 0 end
end
i = i + 2 * n + 1
local ndel = tonumber(ARGV[i])
local dels = {}
for j = 1, ndel do dels[j] = ARGV[i + j] end
i = i + ndel + 1
local nput = tonumber(ARGV[i])
local puts_at = i + 1
i = i + 6 * nput + 1
local nscope = tonumber(ARGV[i])
local scopes_at = i + 1
local max_plugin, max_session, max_keys = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local dtotal = 0
for j = 0, nscope - 1 do
  local at = scopes_at + 4 * j
  local scope, db, dn = ARGV[at], tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2])
  dtotal = dtotal + db
  if dn > 0 and tonumber(redis.call('HGET', usage, 'n:' .. scope) or '0') + dn > max_keys then
    return 0
  end
  if ARGV[at + 3] == '1' and db > 0 and
     tonumber(redis.call('HGET', usage, 'b:' .. scope) or '0') + db > max_session then
    return 0
  end
end
if dtotal > 0 and tonumber(redis.call('HGET', usage, 'total') or '0') + dtotal > max_plugin then
  return 0
end
for _, eid in ipairs(dels) do
  redis.call('DEL', vprefix .. eid)
  for _, k in ipairs({KEYS[1], KEYS[2], KEYS[4]}) do redis.call('ZREM', k, eid) end
  redis.call('HDEL', KEYS[3], eid)
  redis.call('HINCRBY', vers, eid, 1)
end
for j = 0, nput - 1 do
  local at = puts_at + 6 * j
  local eid = ARGV[at]
  redis.call('SET', vprefix .. eid, ARGV[at + 1], 'PXAT', ARGV[at + 4])
  redis.call('HSET', KEYS[3], eid, ARGV[at + 2])
  redis.call('ZADD', KEYS[1], ARGV[at + 3], eid)
  redis.call('ZADD', KEYS[2], ARGV[at + 5], eid)
  redis.call('ZADD', KEYS[4], 0, eid)
  redis.call('HINCRBY', vers, eid, 1)
end
for j = 0, nscope - 1 do
  local at = scopes_at + 4 * j
  for field, d in pairs({['b:' .. ARGV[at]] = ARGV[at + 1], ['n:' .. ARGV[at]] = ARGV[at + 2]}) do
    if redis.call('HINCRBY', usage, field, d) <= 0 then redis.call('HDEL', usage, field) end
  end
end
redis.call('HINCRBY', usage, 'total', dtotal)
redis.call('HINCRBY', usage, 'ver', 1)
redis.call('SADD', KEYS[7], ARGV[3])
return 1
"""
# KEYS: exp lru meta idx usage vers plugins
# ARGV: now vprefix plugin max_plugin max_session max_keys session_warn_bytes n
#       then n writes {eid scope is_session is_put value size meta expires pxat tick}
# Returns 1 when applied, 0 (nothing changed) when the commit needs the planned path.
FAST_COMMIT = _PURGE_FN + """
local now, vprefix = ARGV[1], ARGV[2]
purge(now, vprefix)
local usage, vers = KEYS[5], KEYS[6]
local max_plugin, max_session, max_keys = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local warn_at = tonumber(ARGV[7])
local n = tonumber(ARGV[8])
local scopes, order, had = {}, {}, {}
local pinned = 0
for j = 0, n - 1 do
  local at = 9 + 10 * j
  local eid, scope = ARGV[at], ARGV[at + 1]
  local s = scopes[scope]
  if not s then
    s = {0, 0, ARGV[at + 2] == '1'}
    scopes[scope] = s
    order[#order + 1] = scope
  end
  local meta = redis.call('HGET', KEYS[3], eid)
  had[j] = meta ~= false
  if meta then
    s[1] = s[1] - tonumber(string.match(meta, '^(%d+)'))
    s[2] = s[2] - 1
  end
  if ARGV[at + 3] == '1' then
    local size = tonumber(ARGV[at + 5])
    s[1] = s[1] + size
    s[2] = s[2] + 1
    pinned = pinned + size
  end
end
if pinned > max_plugin then return 0 end
local dtotal = 0
for _, scope in ipairs(order) do
  local s = scopes[scope]
  local b0 = tonumber(redis.call('HGET', usage, 'b:' .. scope) or '0')
  local n0 = tonumber(redis.call('HGET', usage, 'n:' .. scope) or '0')
  if s[2] > 0 and n0 + s[2] > max_keys then return 0 end
  if s[3] and s[1] > 0 and b0 + s[1] > max_session then return 0 end
  if s[3] and b0 < warn_at and warn_at <= b0 + s[1] then return 0 end
  dtotal = dtotal + s[1]
end
if dtotal > 0 and tonumber(redis.call('HGET', usage, 'total') or '0') + dtotal > max_plugin then
  return 0
end
for j = 0, n - 1 do
  local at = 9 + 10 * j
  local eid = ARGV[at]
  if ARGV[at + 3] == '1' then
    redis.call('SET', vprefix .. eid, ARGV[at + 4], 'PXAT', ARGV[at + 8])
    redis.call('HSET', KEYS[3], eid, ARGV[at + 6])
    redis.call('ZADD', KEYS[1], ARGV[at + 7], eid)
    redis.call('ZADD', KEYS[2], ARGV[at + 9], eid)
    redis.call('ZADD', KEYS[4], 0, eid)
    redis.call('HINCRBY', vers, eid, 1)
  elseif had[j] then
    redis.call('DEL', vprefix .. eid)
    for _, k in ipairs({KEYS[1], KEYS[2], KEYS[4]}) do redis.call('ZREM', k, eid) end
    redis.call('HDEL', KEYS[3], eid)
    redis.call('HINCRBY', vers, eid, 1)
  end
end
for _, scope in ipairs(order) do
  local s = scopes[scope]
  for field, d in pairs({['b:' .. scope] = s[1], ['n:' .. scope] = s[2]}) do
    if redis.call('HINCRBY', usage, field, d) <= 0 then redis.call('HDEL', usage, field) end
  end
end
redis.call('HINCRBY', usage, 'total', dtotal)
redis.call('HINCRBY', usage, 'ver', 1)
redis.call('SADD', KEYS[7], ARGV[3])
return 1
"""
