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


def test_a_set_takes_one_round_trip(redis_url: str, sends: list[int]) -> None:
    store = RedisStore(url=redis_url, prefix=f"rt-{uuid.uuid4().hex}")
    scope = Scope("kv", "s1")
    store.set(scope, "warm", b"x")  # scripts loaded, connection open
    for i in range(3):
        sends[0] = 0
        store.set(scope, f"k{i}", b"v" * 80)
        # the fast commit script decides and applies it where the data is
        assert sends[0] == 1, sends[0]
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


def test_one_trip_commits_keep_the_counters_of_the_planned_path(redis_url: str,
                                                                sends: list[int]) -> None:
    """Writes, overwrites and deletes in several scopes, in one transaction and alone:
    the counters the fast script keeps agree with the in-memory store's plan."""
    from wasmext.state.memory import MemoryStore

    fast = RedisStore(url=redis_url, prefix=f"rt-{uuid.uuid4().hex}")
    model = MemoryStore()
    for store in (fast, model):
        with store.begin("kv", "s1") as txn:
            txn.set("a", b"1" * 10)
            txn.set("b", b"2" * 20, scope="plugin")
            txn.set("c", b"3" * 30)
        with store.begin("kv", "s2") as txn:
            txn.set("a", b"x" * 5)
            txn.set("a", b"y" * 7)  # the latest write of a key is the one committed
            txn.delete("never-there")
        store.set(Scope("kv", "s1"), "a", b"4" * 40)  # an overwrite: bytes change, keys not
        store.delete(Scope("kv", "s1"), "c")
        store.delete(Scope("kv", None), "b")
    for scope in (Scope("kv", "s1"), Scope("kv", "s2"), Scope("kv", None)):
        assert fast.usage(scope) == model.usage(scope), scope
        assert fast.keys(scope) == model.keys(scope)
    assert fast.get(Scope("kv", "s2"), "a") == b"y" * 7
    sends[0] = 0
    fast.set(Scope("kv", "s2"), "z", b"z")
    assert sends[0] == 1
