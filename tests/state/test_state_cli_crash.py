"""kill -9 `wasmext state export -o` and `wasmext state import --replace` at random
moments: every file and store is left exactly as before or exactly as after.

40 plugins x 400 keys (~6 MB exported). Each cycle forks the command from a
zygote (cli_child.py), kills it after a random delay within the time an
uninterrupted run takes, and checks what is left.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from state_support import REDIS_SERVER

from wasmext.state import Record, Scope, SQLiteStore, StateStore, dump_records

pytestmark = pytest.mark.slow  # kill loops over the state commands

CHILD = Path(__file__).with_name("cli_child.py")
PLUGINS, KEYS = 40, 400
CYCLES = 20
BUDGET_SECONDS = 150  # a Redis cycle (restore, import, check) takes ~3 s on a busy box
WEEK = 7 * 86400.0


def document(tag: str, now: float) -> list[Record]:
    """Versions "A" and "B" differ in keys and values of every plugin, in both scopes."""
    keys = [f"k{i}" for i in range(KEYS)] if tag == "A" else \
        [f"k{i}" for i in range(KEYS - 20)] + [f"{tag}{i}" for i in range(20)]
    return [Record(f"p{p:02d}", "s" if i % 2 else None, key,
                   (f"{tag}:{p}:{key}:".encode() * 40)[:300], now + WEEK, WEEK)
            for p in range(PLUGINS) for i, key in enumerate(keys)]


def contents(records: list[Record]) -> dict[str, set[tuple[str | None, str, bytes]]]:
    out: dict[str, set[tuple[str | None, str, bytes]]] = {}
    for r in records:
        out.setdefault(r.plugin, set()).add((r.session, r.key, r.value))
    return out


def listing(folder: Path) -> set[tuple[str, int, int]]:
    out = set()
    for e in os.scandir(folder):
        try:
            st = e.stat()
        except FileNotFoundError:
            continue
        out.add((e.name, st.st_ino, st.st_size))
    return out


class Zygote:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(CHILD)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def ask(self, command: str) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def run(self, cwd: Path, *argv: str, kill_after: float | None = None,
            watch: Path | None = None) -> tuple[int, float]:
        """Run `wasmext argv`, killed after `kill_after` seconds if given (counted from the
        moment something in the folder `watch` changes, if given): the wait status and the
        seconds it ran."""
        start = time.monotonic()
        pid = self.ask(f"run {cwd} {json.dumps(list(argv))}")
        if kill_after is not None:
            if watch is not None:  # a few ms window, which a random moment rarely hits
                before = listing(watch)
                while listing(watch) == before and time.monotonic() - start < 10:
                    pass
            time.sleep(kill_after)
            os.kill(pid, signal.SIGKILL)
        status = self.ask(f"reap {pid}")
        return status, time.monotonic() - start

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


def kill_loop(zygote: Zygote, cwd: Path, argv: list[str], check: Callable[[int], str],
              reset: Callable[[], None], watch: Path | None = None) -> dict[str, int]:
    """Calibrate on two full runs, then kill CYCLES runs at random moments (every other one
    within 5 ms of the first change in the folder `watch`, if given); `check(status)`
    names what it found ("old" or "new") after each; `reset()` restores the old state."""
    rng = random.Random(20261123)
    # Twice, keeping the shorter: a first run pays for warming up (a JetStream stream made,
    # caches filled), and a kill time scaled to it would let most runs finish unkilled.
    took = float("inf")
    for _ in range(2):
        reset()
        status, one_run = zygote.run(cwd, *argv)
        assert status == 0 and check(status) == "new", status
        took = min(took, one_run)
    seen = {"killed": 0, "finished": 0, "old": 0, "new": 0}
    started, found = time.monotonic(), "new"
    while seen["killed"] + seen["finished"] < CYCLES:
        assert time.monotonic() - started < BUDGET_SECONDS, seen
        if found == "new":
            reset()
        if watch is not None and (seen["killed"] + seen["finished"]) % 2:
            status, _ = zygote.run(cwd, *argv, kill_after=rng.uniform(0, 0.005), watch=watch)
        else:
            status, ran = zygote.run(cwd, *argv, kill_after=rng.uniform(0, took * 1.3))
            if not os.WIFSIGNALED(status):
                # Finished before its kill: runs are this quick now (the calibration may
                # have met a busier machine), so later kills aim within that.
                took = min(took, ran)
        seen["killed" if os.WIFSIGNALED(status) else "finished"] += 1
        found = check(status)
        seen[found] += 1
    assert seen["killed"] >= CYCLES // 2, seen
    print(f"\n{' '.join(argv[:3])}: one run {took:.2f}s, {seen}")
    return seen


def test_export_over_a_backup(tmp_path: Path, zygote: Zygote) -> None:
    (tmp_path / "wasmext.toml").write_text('[host]\ndata_dir = "data"\n')
    now = time.time()
    with SQLiteStore.in_data_dir(tmp_path / "data") as store:
        store.load(document("A", now))
        new = store.export_state("msgpack")
    old = dump_records(document("B", now))
    assert len(new) > 5_000_000 and old != new
    (tmp_path / "backups").mkdir()
    backup = tmp_path / "backups" / "backup.msgpack"

    def reset() -> None:
        backup.write_bytes(old)

    def check(status: int) -> str:
        data = backup.read_bytes()
        assert data in (old, new), f"a torn backup of {len(data)} bytes"
        for tmp in backup.parent.glob(".backup.msgpack.tmp-*"):  # what a kill may leave
            tmp.unlink()
        return "new" if data == new else "old"

    kill_loop(zygote, tmp_path, ["state", "export", "-o", str(backup)], check, reset,
              watch=backup.parent)


def _import_loop(zygote: Zygote, cwd: Path, store: StateStore,
                 extra: Callable[[], None] = lambda: None) -> None:
    now = time.time()
    versions = {tag: contents(document(tag, now)) for tag in ("A", "B")}
    for tag in ("A", "B"):
        (cwd / f"{tag}.msgpack").write_bytes(dump_records(document(tag, now)))

    def reset() -> None:
        store.load(document("A", now), replace=True)

    def check(status: int) -> str:
        extra()
        got = contents(store.records())
        tag = next((t for t, want in versions.items() if got == want), None)
        if tag is None:  # name what is wrong: an empty, a mixed or a partly imported plugin
            bad = {p: ("empty" if p not in got else "mixed") for p in versions["A"]
                   if got.get(p) not in (versions["A"][p], versions["B"][p])}
            flipped = sorted(p for p in got if got[p] == versions["B"][p])
            pytest.fail(f"not one atomic unit: {bad or f'{len(flipped)} plugins imported'}")
        for p in range(0, PLUGINS, 7):  # the usage counters moved with the entries
            u = store.usage(Scope(f"p{p:02d}", "s"))
            assert u.scope_keys == sum(1 for s, _, _ in versions[tag][f"p{p:02d}"] if s)
        return "old" if tag == "A" else "new"

    kill_loop(zygote, cwd, ["state", "import", "--replace", str(cwd / "B.msgpack")],
              check, reset)


def test_import_replace_sqlite(tmp_path: Path, zygote: Zygote) -> None:
    (tmp_path / "wasmext.toml").write_text('[host]\ndata_dir = "data"\n')
    db = tmp_path / "data" / "state.db"

    def integrity() -> None:
        conn = sqlite3.connect(db)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()

    with SQLiteStore(db) as store:
        _import_loop(zygote, tmp_path, store, integrity)


@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
def test_import_replace_redis(tmp_path: Path, zygote: Zygote, redis_url: str) -> None:
    import redis

    from wasmext.state.redis.store import RedisStore

    url = redis_url.rsplit("/", 1)[0] + "/7"  # the CLI's default prefix, in a db of its own
    client = redis.Redis.from_url(url)
    client.flushdb()
    (tmp_path / "wasmext.toml").write_text(f'[state]\nbackend = "redis"\nurl = "{url}"\n')
    with RedisStore(client) as store:
        _import_loop(zygote, tmp_path, store)
        # the next import cleaned what the killed ones staged
        store.load(document("A", time.time()), replace=True)
        assert client.smembers(b"wasmext:state:staging") == set()
        assert list(client.scan_iter(match=b"*:stage:*")) == []


def test_import_replace_jetstream(tmp_path: Path, zygote: Zygote, jetstream_url: str) -> None:
    """One atomic batch holds every plugin's documents: a killed import left no trace."""
    from wasmext.state.jetstream.store import JetStreamStore

    (tmp_path / "wasmext.toml").write_text(
        f'[state]\nbackend = "jetstream"\nurl = "{jetstream_url}"\nbucket = "cli_crash"\n')
    with JetStreamStore(jetstream_url, bucket="cli_crash") as store:
        _import_loop(zygote, tmp_path, store)
