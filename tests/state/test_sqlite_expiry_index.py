"""The SQLite store's expiry purge walks the expiry index, and still expires.

Every commit first purges its plugin's expired entries. Through the primary key
that purge reads every row of the plugin, so a `set` slowed down as the plugin
grew; the statements it runs must use `entries_expiry`. (No timing here: the
benchmark measures `set` at 100 and 100k keys.)
"""

from __future__ import annotations

from pathlib import Path

from state_support import FakeClock

from wasmext.state.base import Scope, StateLimits
from wasmext.state.sqlite import SQLiteStore


def _fill(store: SQLiteStore, sessions: int, per_session: int, ttl: float) -> None:
    for s in range(sessions):
        txn = store.begin("p", f"s{s}")
        for k in range(per_session):
            txn.set(f"k{k}", b"v", ttl=ttl)
        txn.commit()


def test_the_purge_walks_the_expiry_index(tmp_path: Path) -> None:
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "state.db", StateLimits(), clock=clock)
    try:
        _fill(store, 20, 10, ttl=60)
        _fill(store, 1, 5, ttl=3600)  # session s0 again: 5 of its keys now live longer
        clock.advance(120)
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        store.set(Scope("p", "new"), "fresh", b"v")
        store._conn.set_trace_callback(None)
        purges = [s for s in statements if "expires_at <=" in s]
        assert purges, statements
        for sql in purges:
            plan = " ".join(str(row[3]) for row in
                            store._conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            assert "entries_expiry" in plan, (sql, plan)
        # ...and it expired: only the 5 long-lived keys and the new one are left.
        assert store.keys(Scope("p", "s0")) == [f"k{k}" for k in range(5)]
        assert all(store.keys(Scope("p", f"s{s}")) == [] for s in range(1, 20))
        assert store.keys(Scope("p", "new")) == ["fresh"]
        assert store.get(Scope("p", "s0"), "k4") == b"v"
    finally:
        store.close()


def test_a_commit_with_nothing_expired_skips_the_purge(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db", StateLimits(), clock=FakeClock())
    try:
        _fill(store, 3, 10, ttl=3600)
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        store.set(Scope("p", "s1"), "k1", b"w")
        store._conn.set_trace_callback(None)
        assert not [s for s in statements if s.lstrip().upper().startswith("DELETE")
                    and "expires_at" in s]
        assert store.get(Scope("p", "s1"), "k1") == b"w"
    finally:
        store.close()
