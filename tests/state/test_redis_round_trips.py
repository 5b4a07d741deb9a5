"""A committed Redis write costs a bounded number of round trips, and stays all-or-nothing.

Round trips are counted where redis-py sends a packed command (a pipeline is one),
not timed: the figure's speed is the benchmarks' business (bench_state.py).
"""

from __future__ import annotations

import uuid

import pytest
import redis.connection

from wasmext.state import Scope
from wasmext.state.base import StateLimits, TooManyKeys
from wasmext.state.redis.store import RedisStore


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    count = [0]
    original = redis.connection.Connection.send_packed_command

    def counting(self: redis.connection.Connection, *args: object, **kwargs: object) -> None:
        count[0] += 1
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counting)
    return count


def test_a_set_takes_three_round_trips(redis_url: str, sends: list[int]) -> None:
    store = RedisStore(url=redis_url, prefix=f"rt-{uuid.uuid4().hex}")
    scope = Scope("kv", "s1")
    store.set(scope, "warm", b"x")  # scripts loaded, connection open
    for i in range(3):
        sends[0] = 0
        store.set(scope, f"k{i}", b"v" * 80)
        # the dry-run quota check's reads, the plan's reads, the commit script
        assert sends[0] <= 3, sends[0]
    assert store.get(scope, "k2") == b"v" * 80


def test_a_refused_write_changes_nothing(redis_url: str) -> None:
    limits = StateLimits(max_keys=2)
    store = RedisStore(url=redis_url, prefix=f"rt-{uuid.uuid4().hex}", limits=limits)
    scope = Scope("kv", "s1")
    store.set(scope, "a", b"1")
    store.set(scope, "b", b"2")
    with pytest.raises(TooManyKeys, match="max_keys"):
        store.set(scope, "c", b"3")
    assert store.get(scope, "c") is None and store.get(scope, "a") == b"1"
