"""Figures that grow with a user's workload (issue 25), each beside its floor in one run.

* `http.fetch` from a hook (a loopback server, the same URL every time) against
  a keep-alive httpx client's GET of it;
* `llm.complete` from a hook against a keep-alive POST of the same request body
  to the same loopback chat-completions endpoint;
* a committed SQLite `state.set` from a hook when its plugin holds 100 keys
  against the same with 100k keys (and 1M with `--scale-1m`: filling takes a while);
* a hook that makes one generic `host_call` (`config.get`) against the same
  hook without it, and against the `log` import;
* `plugin.new_instance()` (Store, limits, instance, `_initialize`, registration)
  against a bare wasmtime-py `Store` + `Instance` of the same module;
* a committed Redis `RedisStore.set` against a plain `SET` of the same value from
  the same client library to the same server (when redis-server is installed);
* many plugins: one `Session.on_plain_text` through 100 distinct no-op plugins
  against ten of it through 10 (the same 100 plugin calls: the ratio is the cost
  per plugin at 100 over at 10); the resident memory per distinct plugin is
  `bench_rss.measure_distinct`, reported beside these rows.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import msgpack
import wasmtime
from bench_cases import Budget, Item
from bench_guests import HOST_CALL_IMPORT, host_call_guests
from bench_rss import measure_distinct
from bench_timing import Case, Skipped

from wasmext import HostConfig
from wasmext.services.llm.service import LlmSettings
from wasmext.testing import DATA_AT, guest_wat, make_host

__all__ = ["GROUP", "redis_cases", "scale_cases"]

GROUP = "at scale"
_META = {"session": "bench"}
_ASK = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 16}
_COMPLETION = json.dumps({
    "id": "c", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "hi"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True  # headers and body go out at once, no delayed-ACK wait

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(b"hello", "text/plain")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._answer(_COMPLETION, "application/json")


class _Server(ThreadingHTTPServer):
    daemon_threads = True


def _serve(cleanup: list[Any]) -> str:
    server = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    cleanup.append(stop)
    return f"http://127.0.0.1:{server.server_address[1]}"


def _op_guest(request: dict[str, Any]) -> str:
    blob = msgpack.packb(request)
    return guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(blob)}))",
                     imports=HOST_CALL_IMPORT, data=blob,
                     registration={"hooks": [{"hook": "test"}], "abi_minor": 1},
                     memory_pages=4)


def _check(label: str, ok: bool) -> None:
    if not ok:
        raise RuntimeError(f"{label}: the figure's check failed")


def _world(b: Budget, cleanup: list[Any]) -> list[Item]:
    base = _serve(cleanup)
    llm = LlmSettings(url=f"{base}/v1", model="m")
    host = make_host(
        (_op_guest({"op": "http.fetch", "url": f"{base}/hello"}),
         {"plugin_id": "fetcher", "grants": {"http", "http:127.0.0.1"},
          "limits": {"timeout_ms": 5000, "host_call_timeout_ms": 5000}}),
        (_op_guest({"op": "llm.complete", **_ASK}),
         {"plugin_id": "asker", "grants": {"llm"}, "limits": {"timeout_ms": 5000}}),
        config=HostConfig(llm=llm, state_backend="memory"))
    cleanup.append(host.close)
    fetcher, asker = host.plugins["fetcher"].plugin, host.plugins["asker"].plugin
    _check("http.fetch", fetcher.call("test").value["body"] == b"hello")
    _check("llm.complete", asker.call("test", None, _META).value["text"] == "hi")
    client = httpx2.Client(trust_env=False)
    cleanup.append(client.close)
    body = {"model": "m", **_ASK}
    _check("httpx GET", client.get(f"{base}/hello").content == b"hello")
    n, warm = max(200, b.fresh // 10), max(20, b.warm_fresh // 10)
    return [
        Case("world.httpx_get", "httpx keep-alive GET, loopback (floor)", GROUP,
             lambda: client.get(f"{base}/hello").content, n, warm),
        Case("world.http_fetch", "hook with http.fetch of the same URL", GROUP,
             lambda: fetcher.call("test"), n, warm),
        Case("world.httpx_post", "httpx keep-alive POST of a chat request (floor)", GROUP,
             lambda: client.post(f"{base}/v1/chat/completions", json=body).json(), n, warm),
        Case("world.llm_complete", "hook with llm.complete, same endpoint", GROUP,
             lambda: asker.call("test", None, _META), n, warm),
    ]


def _fill(db: Path, plugin: str, keys: int, far: float) -> None:
    """`keys` live entries of `plugin` in sessions of 1000 (the per-scope cap), with
    the usage rows the store keeps for them, written straight into its tables."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        per = 1000
        for start in range(0, keys, per):
            sid = f"fill-{start // per}"
            count = min(per, keys - start)
            conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                             [(plugin, sid, f"k{i:04d}", b"12345678", 64 + 5 + 8, far, far, i)
                              for i in range(count)])
            conn.execute("INSERT INTO usage VALUES (?, ?, ?, ?)",
                         (plugin, sid, count * (64 + 5 + 8), count))
        conn.execute("COMMIT")
    finally:
        conn.close()


def _state_at(sizes: list[int], b: Budget, cleanup: list[Any]) -> list[Item]:
    items: list[Item] = []
    request = {"op": "state.set", "key": "k", "value": {"text": "x" * 80}}
    for keys in sizes:
        folder = Path(tempfile.mkdtemp(prefix="wasmext-bench-scale-"))
        cleanup.append(lambda f=folder: shutil.rmtree(f, ignore_errors=True))
        config = HostConfig(data_dir=folder, state_backend="sqlite", state_limits={
            "max_plugin_bytes": 1 << 30, "ttl_seconds": 30 * 86400.0})
        host = make_host((_op_guest(request), {"plugin_id": "kv", "grants": {"state"}}),
                         config=config)
        cleanup.append(host.close)
        plugin = host.plugins["kv"].plugin
        plugin.call("test", None, _META)  # opens the store and makes its tables
        _fill(folder / "state.db", "kv", keys, far=4e9)
        _check(f"state.set at {keys}", plugin.call("test", None, _META) is not None)
        tag = f"{keys // 1000}k" if keys >= 1000 else str(keys)
        items.append(Case(f"scale.sqlite_set_{tag}", f"hook with state.set, plugin holds"
                          f" {keys:,} keys (SQLite)", GROUP,
                          lambda p=plugin: p.call("test", None, _META),
                          max(100, b.fresh // 20), max(10, b.warm_fresh // 20)))
    return items


def _calls(b: Budget, cleanup: list[Any]) -> list[Item]:
    wats = host_call_guests()
    host = make_host((wats["none"], {"plugin_id": "none"}), (wats["log"], {"plugin_id": "log"}),
                     (wats["get"], {"plugin_id": "get", "settings": {"greeting": "hi"}}))
    cleanup.append(host.close)
    none, log, get_ = (host.plugins[p].plugin for p in ("none", "log", "get"))
    for p in (none, log, get_):
        _check("host call", p.call("test") is not None)
    engine = wasmtime.Engine()
    bare_module = wasmtime.Module(engine, wasmtime.wat2wasm(guest_wat(
        None, response={"ok": True}, hooks=("test",))))
    new_instance_plugin = make_host(guest_wat(None, response={"ok": True}, hooks=("test",)))
    cleanup.append(new_instance_plugin.close)
    fresh = next(iter(new_instance_plugin.plugins.values())).plugin
    return [
        Case("scale.hook_none", "hook, no host call", GROUP, lambda: none.call("test"),
             b.fresh, b.warm_fresh),
        Case("scale.hook_log", "hook with one `log` call", GROUP, lambda: log.call("test"),
             b.fresh, b.warm_fresh),
        Case("scale.hook_config_get", "hook with one `host_call` (config.get)", GROUP,
             lambda: get_.call("test"), b.fresh, b.warm_fresh),
        Case("scale.bare_instance", "wasmtime Store + Instance (floor)", GROUP,
             lambda: wasmtime.Instance(wasmtime.Store(engine), bare_module, []),
             b.fresh, b.warm_fresh),
        Case("scale.new_instance", "plugin.new_instance() (+register)", GROUP,
             fresh.new_instance, b.fresh, b.warm_fresh),
    ]


def redis_cases(b: Budget, cleanup: list[Any]) -> list[Item]:
    """A committed `RedisStore.set` and its floor, a plain `SET` (same client, server)."""
    import redis
    from bench_state import _redis

    from wasmext.state import Scope
    from wasmext.state.redis.store import RedisStore

    server = _redis()
    if isinstance(server, str):
        return [Skipped(key, label, GROUP, server) for key, label in (
            ("scale.redis_plain_set", "plain SET (redis-py)"),
            ("scale.redis_store_set", "RedisStore.set, committed"))]
    url, proc = server
    cleanup.append(proc.kill)
    client = redis.Redis.from_url(url)
    store = RedisStore(url=url)
    cleanup += [client.close, store.close]
    value, scope = b"x" * 80, Scope("kv", "bench")
    store.set(scope, "k", value)
    _check("RedisStore.set", store.get(scope, "k") == value)
    return [
        Case("scale.redis_plain_set", "plain SET (redis-py, floor)", GROUP,
             lambda: client.set(b"plain:k", value), b.fresh, b.warm_fresh),
        Case("scale.redis_store_set", "RedisStore.set, committed", GROUP,
             lambda: store.set(scope, "k", value), b.fresh, b.warm_fresh),
    ]


def distinct_noop(i: int) -> bytes:
    """A no-op on_plain_text guest whose bytes (so its digest) differ for each i."""
    return bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True}, hooks=("on_plain_text",),
                                             data=f"distinct plugin {i}".encode())))


def _many(b: Budget, cleanup: list[Any]) -> list[Item]:
    """A chain of 100 distinct plugins against ten runs of a chain of 10."""
    sessions = {}
    for n in (10, 100):
        host = make_host(*[(distinct_noop(i), {"plugin_id": f"p{i}"}) for i in range(n)])
        cleanup.append(host.close)
        session = host.session().__enter__()
        _check(f"chain of {n}", session.on_plain_text("hi").value == "hi")
        sessions[n] = session
    ten, hundred = sessions[10], sessions[100]
    measure_distinct(Path(__file__).resolve().parents[1])  # RSS per plugin, for the report

    def ten_chains() -> None:
        for _ in range(10):
            ten.on_plain_text("hi")
    return [
        Case("scale.chain_10x10", "10 x Session.on_plain_text through 10 plugins", GROUP,
             ten_chains, max(20, b.fresh // 10), max(5, b.warm_fresh // 10)),
        Case("scale.chain_100", "Session.on_plain_text through 100 distinct plugins", GROUP,
             lambda: hundred.on_plain_text("hi"), max(20, b.fresh // 10),
             max(5, b.warm_fresh // 10)),
    ]


def scale_cases(b: Budget, cleanup: list[Any], *, million: bool = False,
                many: bool = True) -> list[Item]:
    """The issue-25 figures and their floors (`many`: the 100-plugin rows too)."""
    sizes = [100, 100_000] + ([1_000_000] if million else [])
    return (_world(b, cleanup) + _state_at(sizes, b, cleanup) + _calls(b, cleanup)
            + redis_cases(b, cleanup) + (_many(b, cleanup) if many else []))
