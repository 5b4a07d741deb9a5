"""Storage trouble is the host's: a frozen Redis or nats-server answers `unavailable` within
the call's deadline and nothing acknowledged is lost; two host processes sharing one store
never make a plugin fault or conflict on different sessions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.state.conftest import NATS_SERVER, NO_NATS, NO_REDIS, REDIS_SERVER, redis_server
from tests.state.state_support import cas_counter_from_threads, nats_server
from wasmext import PluginError, StateUnavailable
from wasmext.state import Scope, StateStore

sys.path.insert(0, str(Path(__file__).parent))
from fault_child import host, op

CHILD = Path(__file__).parent / "fault_child.py"
TIMEOUT_MS = 1000


@pytest.fixture
def own_redis() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A redis-server this test alone uses (it gets frozen)."""
    if REDIS_SERVER is None:
        pytest.skip(NO_REDIS)
    with redis_server() as (url, proc):
        try:
            yield url, proc
        finally:
            os.kill(proc.pid, signal.SIGCONT)  # a frozen server cannot stop


@pytest.fixture
def own_nats() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A nats-server with JetStream this test alone uses (it gets frozen)."""
    if NATS_SERVER is None:
        pytest.skip(NO_NATS)
    with nats_server() as (url, proc):
        try:
            yield url, proc
        finally:
            os.kill(proc.pid, signal.SIGCONT)


def _open(backend: str, url: str) -> StateStore:
    if backend == "jetstream":
        from wasmext.state.jetstream.store import JetStreamStore

        return JetStreamStore(url)
    from wasmext.state.redis.store import RedisStore

    return RedisStore(url=url)


def test_a_frozen_redis_answers_unavailable_within_the_deadline(
        own_redis: tuple[str, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    _frozen_server("redis", *own_redis, tmp_path)


@pytest.mark.slow  # five seconds of freezing by design
def test_a_frozen_nats_server_answers_unavailable_within_the_deadline(
        own_nats: tuple[str, subprocess.Popen[bytes]], tmp_path: Path) -> None:
    _frozen_server("jetstream", *own_nats, tmp_path)


def _frozen_server(backend: str, url: str, proc: subprocess.Popen[bytes],
                   tmp_path: Path) -> None:
    h = host(backend, url, str(tmp_path), timeout_ms=TIMEOUT_MS,
             host_call_timeout_ms=TIMEOUT_MS)
    stop = threading.Event()
    calls: list[tuple[float, float, str, str, str]] = []  # start, seconds, outcome, session, key

    def worker(n: int) -> None:
        i = 0
        while not stop.is_set():
            session, key = f"s{n}", f"k{i % 100}"  # under the session key quota
            started = time.monotonic()
            try:
                op(h, session, op="state.set", key=key, value=i)
                outcome = "ok"
            except StateUnavailable:
                outcome = "unavailable"
            except Exception as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            calls.append((started, time.monotonic() - started, outcome, session, key))
            i += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    time.sleep(3.0)
    os.kill(proc.pid, signal.SIGCONT)
    resumed = time.monotonic()
    time.sleep(1.5)
    stop.set()
    for t in threads:
        t.join(10)

    outcomes = {c[2] for c in calls}
    assert outcomes <= {"ok", "unavailable"}, outcomes
    slowest = max(c[1] for c in calls)
    worst = max(calls, key=lambda c: c[1])
    assert slowest < TIMEOUT_MS / 1000 + 1.0, (worst, frozen_at)  # the deadline, and a margin
    assert any(c[2] == "unavailable" for c in calls)
    print(f"frozen {backend}: {len(calls)} calls,"
          f" {sum(c[2] == 'unavailable' for c in calls)} unavailable, slowest {slowest:.3f} s")
    late = [c for c in calls if c[0] > resumed + 0.5]
    assert late and all(c[2] == "ok" for c in late), "calls did not recover after SIGCONT"
    with _open(backend, url) as store:
        for _, _, outcome, session, key in calls:
            if outcome == "ok":  # acknowledged: must be there
                assert store.get(Scope("counter", session), key) is not None, (session, key)
    plugin = h.plugins["counter"].plugin
    assert plugin.faults == 0 and not plugin.quarantined
    h.close()


def _run_two(backend: str, where: str, data_dir: Path, count: int) -> list[dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, str(CHILD), backend, where, str(data_dir),
                               f"p{i}", str(count)], stdout=subprocess.PIPE, env=env)
             for i in range(2)]
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        out.append(json.loads(stdout.decode().strip().splitlines()[-1]))
    return out


@pytest.mark.parametrize("backend", ["sqlite", "redis",
                                     pytest.param("jetstream", marks=pytest.mark.slow)])
def test_two_processes_increment_different_sessions_without_faults(
        backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    where = request.getfixturevalue(f"{backend}_url") if backend != "sqlite" else "-"
    count = 150
    results = _run_two(backend, where, tmp_path, count)
    for r in results:
        assert r["count"] == count, r
        assert r["faults"] == 0 and not r["quarantined"] and r["host_faults"] == 0, r
        # Different sessions never conflict, so a commit never gives up on conflicts.
        # (On a loaded machine a call may still run out of time waiting on the
        # store: that is `unavailable`, retried by the driver, never a fault.)
        assert "error:conflict" not in r["tally"] and "gave_up" not in r["tally"], r
    print(backend, results)


def test_a_state_error_answered_by_the_plugin_stays_a_plugin_error(tmp_path: Path) -> None:
    h = host("sqlite", "-", str(tmp_path))
    with pytest.raises(PluginError) as info:
        op(h, "s", op="state.get", key="missing")
    assert info.value.code == "not_found"
    h.close()


@pytest.mark.parametrize("same_key", [False, True])
def test_redis_commits_conflict_only_on_the_entries_they_touched(
        redis_url: str, same_key: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another host commits between this commit's plan and its script: a write to
    another session goes through at once; a write to the same key is planned again
    (and a compare-and-set on it then fails)."""
    import wasmext.state.redis.store as rs
    from wasmext.state import CasConflict, Scope
    from wasmext.state.redis.store import RedisStore

    plugin = f"interleave-{same_key}"
    a, b = RedisStore(url=redis_url), RedisStore(url=redis_url)
    a.drop_plugin(plugin)
    a.set(Scope(plugin, "s1"), "n", b"0")
    real_plan, plans = rs.plan, []

    def plan_then_interfere(view: Any, changes: Any, *args: Any, **kwargs: Any) -> Any:
        done = real_plan(view, changes, *args, **kwargs)
        if not kwargs.get("dry_run") and changes.plugin == plugin and view._r is a._r:
            plans.append(done)
            if len(plans) == 1:  # the other host commits right after our plan
                b.set(Scope(plugin, "s1" if same_key else "s2"), "n", b"9")
        return done

    monkeypatch.setattr(rs, "plan", plan_then_interfere)
    txn = a.begin(plugin, "s1")
    txn.cas("n", b"0", b"1")
    if same_key:
        with pytest.raises(CasConflict):
            txn.commit()
        assert len(plans) == 1  # the script refused the stale plan; the replan saw "9"
        # (and raised CasConflict before it was recorded)
        assert a.get(Scope(plugin, "s1"), "n") == b"9"
    else:
        txn.commit()
        assert len(plans) == 1  # one plan, one script: no retry
        assert a.get(Scope(plugin, "s1"), "n") == b"1"
        assert a.get(Scope(plugin, "s2"), "n") == b"9"
    usage = a.usage(Scope(plugin, "s1"))
    assert usage.scope_keys == 1
    entries = 1 if same_key else 2  # the accounting stayed exact
    assert usage.plugin_bytes == entries * a.limits.entry_size("n", b"1")
    a.drop_plugin(plugin)
    a.close()
    b.close()


def test_sqlite_group_commit_keeps_every_outcome_apart(tmp_path: Path) -> None:
    """Concurrent commits share transactions: a conflict rolls back only its own change."""
    from wasmext.state import Scope, SQLiteStore

    store = SQLiteStore(tmp_path / "state.db")
    threads, rounds = 6, 25
    cas_counter_from_threads(store, threads, rounds, join_s=60)
    assert store.get(Scope("g"), "n") == str(threads * rounds).encode()
    assert store.stats().conflicts > 0  # commits did conflict, and each rolled back alone
    for n in range(threads):
        assert store.get(Scope("g", f"s{n}"), "last") == str(rounds - 1).encode()
    store.close()
    reopened = SQLiteStore(tmp_path / "state.db")  # what was acknowledged is on disk
    assert reopened.get(Scope("g"), "n") == str(threads * rounds).encode()
    assert reopened.usage(Scope("g")).plugin_bytes > 0
    reopened.close()


def test_sqlite_group_commit_leaves_out_a_change_whose_caller_gave_up(tmp_path: Path) -> None:
    """A change queued while another transaction ran: its caller's deadline passed
    meanwhile, so the transaction that takes the queue writes everything else, not it."""
    import time

    from wasmext.state import Scope, SQLiteStore, StateUnavailable
    from wasmext.state.accounting import Changes, Plan, Write
    from wasmext.state.deadline import within
    from wasmext.state.sqlite import _Pending

    store = SQLiteStore(tmp_path / "state.db")
    try:
        with within(time.monotonic() + 0.05):  # queued by a remote call's thread
            late = _Pending(Changes("p", writes={("s1", "late"): Write(b"1", 60)}), time.time())
        fine = _Pending(Changes("p", writes={("s1", "fine"): Write(b"2", 60)}), time.time())
        store._queue += [late, fine]
        time.sleep(0.1)
        store._lead()
        assert isinstance(late.result, StateUnavailable)
        assert "nothing written" in late.result.message
        assert isinstance(fine.result, Plan)
        assert store.get(Scope("p", "s1"), "late") is None
        assert store.get(Scope("p", "s1"), "fine") == b"2"
    finally:
        store.close()


def test_a_state_file_locked_before_the_first_op_is_unavailable_within_the_deadline(
        tmp_path: Path, healthy: Any) -> None:
    # The store opens at a call's first state op. A file another process holds locked
    # in rollback-journal mode (switching it to WAL needs the lock) kept that call for
    # the store's 10 s busy timeout, whatever the call's deadline.
    import sqlite3

    from wasmext import HostConfig
    from wasmext.testing import host_calls_wat, make_host

    other = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    other.execute("CREATE TABLE theirs (a)")
    other.execute("BEGIN EXCLUSIVE")
    writes = host_calls_wat({"op": "state.set", "key": "k", "value": 1, "scope": "plugin"})
    config = HostConfig(data_dir=tmp_path, state_backend="sqlite")
    try:
        with make_host((writes, {"plugin_id": "writer", "grants": ["state"],
                                 "limits": {"timeout_ms": 300}}), config=config) as host:
            writer = host.plugins["writer"].plugin
            for _ in range(2):
                started = time.monotonic()
                with pytest.raises(StateUnavailable, match="cannot open the state file"):
                    writer.call("test", None, {"session": "s"})
                assert time.monotonic() - started < 3
            assert not writer.faults and not writer.quarantined
            other.execute("ROLLBACK")
            # Opening the file (schema, WAL) is not what is timed here: on a loaded
            # machine it took longer than the 300 ms the locked calls were given.
            writer.set_call_limits(timeout_ms=5000)
            assert writer.call("test", None, {"session": "s"}).value is None  # opens now
            assert healthy.call("test", 1).value == "alive"
    finally:
        other.close()
