"""The Redis backend, for several hosts sharing state (Redis 6.2 or later).

`store` (`RedisStore`: the key layout and the StateStore methods) · `scripts`
(the Lua scripts that commit atomically) · `connection` (a redis-py client whose
every wait is bounded by the calling hook's deadline) · `staging` (the two halves
of an atomic import). Imported only when a Redis store is configured.
"""
