"""What only one backend does: SQLite's file and durability, Redis's native expiry."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest
from state_support import NO_REDIS, REDIS_SERVER, FakeClock

from wasmext.state import Scope, SQLiteStore, StateLimits, StateUnavailable

S1 = Scope("p", "s1")


def test_sqlite_lives_in_one_wal_file_under_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with SQLiteStore.in_data_dir(data_dir) as store:
        store.set(S1, "k", b"v")
        assert store.path == data_dir / "state.db"  # type: ignore[attr-defined]
    conn = sqlite3.connect(data_dir / "state.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT key, value FROM entries").fetchall() == [("k", b"v")]
    finally:
        conn.close()


def test_sqlite_commits_are_full_sync(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        store.set(S1, "k", b"v")
        assert store.get(S1, "k") == b"v"  # a touch-only commit relaxes sync for itself only
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    finally:
        store.close()


def test_sqlite_busy_file_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path, busy_timeout=0.05)
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(StateUnavailable) as exc:
            store.set(S1, "k", b"v")
        assert exc.value.code == "unavailable"
        blocker.execute("ROLLBACK")
        store.set(S1, "k", b"v")
    finally:
        blocker.close()
        store.close()


@pytest.fixture
def redis_client(redis_url: str):  # type: ignore[no-untyped-def]
    if REDIS_SERVER is None:
        pytest.skip(NO_REDIS)
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_redis_values_carry_a_native_expiry(redis_client, redis_url: str) -> None:  # type: ignore[no-untyped-def]
    from wasmext.state.redis.store import RedisStore

    prefix = f"native:{uuid.uuid4().hex}"
    store = RedisStore(redis_client, StateLimits(ttl_seconds=60), prefix=prefix)
    store.set(S1, "k", b"v", ttl=30)
    key = f"{prefix}:{{p}}:v:s2:s1:k".encode()
    assert redis_client.get(key) == b"v"
    assert 29_000 < redis_client.pttl(key) <= 30_001
    # a read refreshes the native expiry too (to the key's own ttl, 30 s)
    redis_client.pexpire(key, 5_000)
    assert store.get(S1, "k") == b"v"
    assert 29_000 < redis_client.pttl(key) <= 30_001
    # Redis drops an expired value by itself, without any host running
    store.set(S1, "short", b"v", ttl=0.05)
    time.sleep(0.2)
    assert redis_client.exists(f"{prefix}:{{p}}:v:s2:s1:short".encode()) == 0
    assert store.get(S1, "short") is None
    assert store.keys(S1) == ["k"]
    store.purge_expired()
    assert store.usage(S1).scope_keys == 1


def test_redis_needs_bytes_responses(redis_url: str) -> None:
    import redis

    from wasmext.state.redis.store import RedisStore

    with pytest.raises(ValueError, match="decode_responses"):
        RedisStore(redis.Redis.from_url(redis_url, decode_responses=True))


def test_redis_down_is_unavailable() -> None:
    pytest.importorskip("redis")
    import socket

    from wasmext.state.redis.store import RedisStore

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisStore(url=f"redis://127.0.0.1:{port}/0", clock=FakeClock())
    with pytest.raises(StateUnavailable) as exc:
        store.set(S1, "k", b"v")
    assert exc.value.code == "unavailable"
    with pytest.raises(StateUnavailable), store.begin("p", "s1") as txn:
        txn.get("k")
