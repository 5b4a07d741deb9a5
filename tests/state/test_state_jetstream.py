"""What only the JetStream backend does: its bucket and documents, the server's limits,
an unreachable or silent server, NATS authentication, and `wasmext state` against it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from state_support import NATS_SERVER, NO_NATS, FakeClock, cas_counter_from_threads, nats_server

from support import free_port, self_signed_certificate
from wasmext.state import QuotaExceeded, Scope, StateLimits, StateUnavailable
from wasmext.state.deadline import within

pytest.importorskip("nats")
from wasmext.state.jetstream.store import JetStreamStore

S1 = Scope("p", "s1")
G = Scope("p")


@pytest.fixture
def store(jetstream_url: str) -> Iterator[JetStreamStore]:
    s = JetStreamStore(jetstream_url, bucket=f"js{uuid.uuid4().hex[:10]}", clock=FakeClock())
    yield s
    s.close()


def _raw(url: str, bucket: str) -> dict[str, object]:
    """The bucket's keys and stream settings, read with nats-py directly."""
    import asyncio

    import nats

    async def read() -> dict[str, object]:
        nc = await nats.connect(url)
        js = nc.jetstream()
        info = await js.stream_info(f"KV_{bucket}", subjects_filter=">")
        kv = await js.key_value(bucket)
        try:
            keys = sorted(await kv.keys())
        except nats.js.errors.NoKeysError:
            keys = []
        values = {k: (await kv.get(k)).value for k in keys}
        await nc.close()
        return {"config": info.config, "values": values}

    return asyncio.run(read())


def test_documents_per_scope_and_per_plugin(store: JetStreamStore, jetstream_url: str) -> None:
    store.set(S1, "a", b"1")
    store.set(S1, "b", b"2")
    store.set(G, "c", b"3")
    raw = _raw(jetstream_url, store.bucket)
    config = raw["config"]
    assert config.allow_atomic and config.allow_direct  # type: ignore[attr-defined]
    values = raw["values"]
    assert isinstance(values, dict)
    # "p" is "cA" in base64url; the session "s1" is "czE"
    assert sorted(values) == ["s.cA.g", "s.cA.sczE", "u.cA"]
    session = msgpack.unpackb(values["s.cA.sczE"])
    assert sorted(session) == ["a", "b"] and session["a"][0] == b"1"
    usage = msgpack.unpackb(values["u.cA"])
    size = store.limits.entry_size("a", b"1")
    assert usage["t"] == 3 * size and usage["s"]["sczE"][:2] == [2 * size, 2]
    # a scope emptied is deleted from the bucket, and so is the plugin's accounting;
    # the deletion markers expire by themselves (no trace of every session ever ended)
    store.drop_plugin("p")
    assert _raw(jetstream_url, store.bucket)["values"] == {}
    assert store.records() == []
    for key in ("s.cA.sczE", "u.cA"):
        headers = _headers(jetstream_url, store.bucket, key)
        assert headers.get("KV-Operation") == "DEL" and headers.get("Nats-TTL"), headers


def _headers(url: str, bucket: str, key: str) -> dict[str, str]:
    import asyncio

    import nats

    async def read() -> dict[str, str]:
        nc = await nats.connect(url)
        msg = await nc.jetstream().get_msg(f"KV_{bucket}", subject=f"$KV.{bucket}.{key}",
                                           direct=True)
        await nc.close()
        return dict(msg.headers or {})

    return asyncio.run(read())


def test_a_document_over_max_payload_fails_only_its_own_commit(
        jetstream_url: str) -> None:
    """Two commits in one group: the one whose document would not fit is refused alone."""
    from wasmext.state.accounting import Changes, Plan, Write
    from wasmext.state.jetstream.store import _Pending

    limits = StateLimits(max_plugin_bytes=8 << 20, max_session_bytes=8 << 20)
    store = JetStreamStore(jetstream_url, limits, bucket=f"grp{uuid.uuid4().hex[:10]}")
    try:
        now = time.time()
        huge = _Pending(Changes("p", writes={(None, "huge"): Write(b"y" * (1100 << 10), 60)}),
                        now, None)
        small = _Pending(Changes("p", writes={("s1", "k"): Write(b"v", 60)}), now, None)
        store._lead("p", [huge, small])
        assert isinstance(huge.result, QuotaExceeded) and "max_payload" in huge.result.message
        assert isinstance(small.result, Plan)
        assert store.get(S1, "k") == b"v" and store.keys(G) == []
    finally:
        store.close()


def test_a_scope_over_the_servers_max_payload_is_a_named_quota_error(
        jetstream_url: str) -> None:
    limits = StateLimits(max_plugin_bytes=8 << 20, max_session_bytes=8 << 20)
    store = JetStreamStore(jetstream_url, limits, bucket=f"big{uuid.uuid4().hex[:10]}")
    try:
        store.set(G, "small", b"x")
        with pytest.raises(QuotaExceeded) as info:
            store.set(G, "huge", b"y" * (1100 * 1024))
        assert "max_payload" in info.value.message
        assert store.keys(G) == ["small"]  # nothing of the refused commit landed
        store.set(G, "fine", b"z" * 1000)
        assert store.keys(G) == ["fine", "small"]
    finally:
        store.close()


def test_a_closed_store_is_unavailable(jetstream_url: str) -> None:
    s = JetStreamStore(jetstream_url, bucket=f"closed{uuid.uuid4().hex[:10]}")
    s.set(S1, "k", b"v")
    s.close()
    s.close()  # twice is harmless
    with pytest.raises(StateUnavailable, match="closed"):
        s.get(S1, "k")


def test_a_store_closed_after_its_server_went_leaves_no_task_for_the_collector() -> None:
    """Closing a store whose server is gone (its drain fails) still ends its connection's
    tasks on the store's loop before closing it (`wasmext.loops.stop_in_thread`): none is
    left pending for the garbage collector to close on a closed loop."""
    import asyncio

    with nats_server() as (url, proc):
        s = JetStreamStore(url, bucket=f"gone{uuid.uuid4().hex[:10]}")
        s.set(S1, "k", b"v")
        loop, thread = s._b._loop, s._b._thread
        assert any(not t.done() for t in asyncio.all_tasks(loop))  # the client's tasks
        proc.terminate()
        proc.wait(10)
    started = time.monotonic()
    s.close()
    assert time.monotonic() - started < 10
    assert loop.is_closed() and not thread.is_alive()
    assert [t for t in asyncio.all_tasks(loop) if not t.done()] == []


def test_a_damaged_document_is_unavailable_not_a_crash(store: JetStreamStore) -> None:
    store.set(S1, "k", b"v")
    store._b.commit([])  # nothing to write is no batch at all
    from wasmext.state.jetstream.connection import Write

    for junk in (b"\xc1not msgpack", msgpack.packb({"k": "not an entry"}),
                 msgpack.packb({"k": [b"v", 1, 2.0]})):
        doc = store._b.get_many(["s.cA.sczE"])[0]
        store._b.commit([Write("s.cA.sczE", junk, doc.revision)])
        with pytest.raises(StateUnavailable, match="damaged"):
            store.get(S1, "k")
        with pytest.raises(StateUnavailable, match="damaged"):
            store.set(S1, "other", b"v")
    doc = store._b.get_many(["u.cA"])[0]
    store._b.commit([Write("u.cA", msgpack.packb({"s": {"sczE": "bad"}}), doc.revision)])
    with pytest.raises(StateUnavailable, match="damaged"):
        store.usage(S1)


def test_an_unreachable_server_is_unavailable_within_the_deadline() -> None:
    store = JetStreamStore(f"nats://127.0.0.1:{free_port()}", bucket="nowhere")
    try:
        started = time.monotonic()
        with within(time.monotonic() + 0.5), pytest.raises(StateUnavailable) as info:
            store.set(S1, "k", b"v")
        assert time.monotonic() - started < 3
        assert info.value.code == "unavailable"
    finally:
        store.close()


def test_a_server_that_never_answers_is_unavailable_within_the_deadline() -> None:
    """A listener that accepts and then says nothing (a hung server, a black hole)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        silent.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    store = JetStreamStore(f"nats://127.0.0.1:{silent.getsockname()[1]}", bucket="silent",
                           timeout=30)
    try:
        for _ in range(2):  # the first connects, the second finds the attempt still hanging
            started = time.monotonic()
            with within(time.monotonic() + 0.5), pytest.raises(StateUnavailable):
                store.get(S1, "k")
            assert time.monotonic() - started < 3
    finally:
        stop.set()
        t.join(2)
        store.close()
        for conn in held:
            conn.close()
        silent.close()


@pytest.fixture(scope="module")
def secured_nats() -> Iterator[str]:
    if NATS_SERVER is None:
        pytest.skip(NO_NATS)
    with nats_server("--user", "state", "--pass", "s3cret-pass-word") as (url, _proc):
        yield url


def test_a_server_requiring_a_login(secured_nats: str) -> None:
    good = JetStreamStore(secured_nats, bucket="authed",
                          options={"user": "state", "password": "s3cret-pass-word"},
                          secrets=["s3cret-pass-word"])
    try:
        good.set(S1, "k", b"v")
        assert good.get(S1, "k") == b"v"
    finally:
        good.close()
    wrong = "wr0ng-pass-word"
    bad = JetStreamStore(secured_nats, bucket="authed",
                         options={"user": "state", "password": wrong}, secrets=[wrong])
    try:
        with pytest.raises(StateUnavailable) as info:
            bad.get(S1, "k")
        assert "authorization failed" in info.value.message.lower()
        assert wrong not in info.value.message
    finally:
        bad.close()
    host, port = secured_nats.removeprefix("nats://").split(":")
    in_url = JetStreamStore(f"nats://state:{wrong}@{host}:{port}", bucket="authed")
    try:
        with pytest.raises(StateUnavailable) as info:
            in_url.get(S1, "k")
        assert wrong not in info.value.message and wrong not in str(info.value)
    finally:
        in_url.close()


def test_the_config_uses_the_nats_credentials(secured_nats: str, tmp_path: Path) -> None:
    from wasmext.config import load_config, open_store

    (tmp_path / "nats-pass").write_text("s3cret-pass-word\n")
    (tmp_path / "wasmext.toml").write_text(
        f'[state]\nbackend = "jetstream"\nurl = "{secured_nats}"\nbucket = "from_config"\n'
        '[nats]\nuser = "state"\npassword_file = "nats-pass"\n')
    config = load_config(tmp_path / "wasmext.toml")
    assert (config.state_backend, config.state_bucket) == ("jetstream", "from_config")
    with open_store(config) as s:
        assert isinstance(s, JetStreamStore) and s.bucket == "from_config"
        s.set(S1, "k", b"v")
        assert s.get(S1, "k") == b"v"


def test_the_config_refuses_a_bad_bucket_name(tmp_path: Path) -> None:
    from wasmext.config import load_config
    from wasmext.errors import ConfigError

    (tmp_path / "wasmext.toml").write_text(
        '[state]\nbackend = "jetstream"\nurl = "nats://127.0.0.1:4222"\nbucket = "a.b>"\n')
    with pytest.raises(ConfigError, match=r"state\.bucket"):
        load_config(tmp_path / "wasmext.toml")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmext_cli", "state", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.slow  # three `wasmext` processes
def test_state_export_and_import_through_the_cli(jetstream_url: str, tmp_path: Path) -> None:
    bucket = f"cli{uuid.uuid4().hex[:10]}"
    (tmp_path / "wasmext.toml").write_text(
        f'[state]\nbackend = "jetstream"\nurl = "{jetstream_url}"\nbucket = "{bucket}"\n')
    with JetStreamStore(jetstream_url, bucket=bucket) as s:
        s.set(Scope("pii-mask", "s1"), "count", msgpack.packb({"n": 3}))
        s.set(Scope("pii-mask"), "total", msgpack.packb(7))
    listed = json.loads(_cli("ls", "--json", cwd=tmp_path).stdout)
    assert {(r["plugin"], r["session"], r["key"]) for r in listed} == {
        ("pii-mask", "s1", "count"), ("pii-mask", None, "total")}
    backup = tmp_path / "backup.json"
    done = _cli("export", "--format", "json", "-o", str(backup), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with JetStreamStore(jetstream_url, bucket=bucket) as s:
        s.delete(Scope("pii-mask"), "total")
        s.set(Scope("pii-mask", "s2"), "later", b"x")  # --replace removes it again
    done = _cli("import", "--replace", "--format", "json", str(backup), cwd=tmp_path)
    assert done.stdout.strip() == "imported 2 entries", done.stderr
    with JetStreamStore(jetstream_url, bucket=bucket) as s:
        assert msgpack.unpackb(s.get(Scope("pii-mask"), "total")) == 7
        assert s.keys(Scope("pii-mask", "s2")) == []
        assert s.usage(Scope("pii-mask", "s1")).scope_keys == 1


def test_wasmext_run_keeps_its_state_in_jetstream(jetstream_url: str, tmp_path: Path) -> None:
    """The example session, with `[state] backend = "jetstream"` in its config."""
    import shutil

    import wasmext_cli

    example = Path(wasmext_cli.__file__).parent / "example"
    shutil.copytree(example, tmp_path / "ex", ignore=shutil.ignore_patterns("__pycache__"))
    config = tmp_path / "ex" / "wasmext.toml"
    bucket = f"run{uuid.uuid4().hex[:10]}"
    config.write_text(config.read_text().replace("[host]\n", '[host]\ndata_dir = "data"\n')
                      + f'\n[state]\nbackend = "jetstream"\nurl = "{jetstream_url}"\n'
                        f'bucket = "{bucket}"\n')
    done = subprocess.run([sys.executable, "-m", "wasmext_cli", "run", "transcript.json",
                           "--config", "wasmext.toml", "--policy", "policy.toml", "--json"],
                          capture_output=True, text=True, cwd=tmp_path / "ex", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    with JetStreamStore(jetstream_url, bucket=bucket) as s:
        assert s.records(), "the session's state is not in the bucket"
    assert not (tmp_path / "ex" / "data" / "state.db").exists()  # no SQLite beside it


PERMISSIONS = """
authorization {
  ADMIN = { publish = ">", subscribe = ">" }
  STATE = {
    publish = { allow = ["$KV.wasmext_state.>", "$JS.API.DIRECT.GET.KV_wasmext_state.>",
                         "$JS.API.STREAM.INFO.KV_wasmext_state"] }
    subscribe = { allow = ["_INBOX_state.>"] }
  }
  users = [
    { user = admin, password = "admin-pass-word", permissions = $ADMIN }
    { user = state, password = "state-pass-word", permissions = $STATE }
  ]
}
"""


def test_the_documented_permissions_suffice(tmp_path: Path) -> None:
    """docs/cluster.md's STATE permissions: a bucket created beforehand is used with
    nothing more (the first store, as admin, creates it)."""
    if NATS_SERVER is None:
        pytest.skip(NO_NATS)
    conf = tmp_path / "nats.conf"
    conf.write_text(PERMISSIONS)
    with nats_server("-c", str(conf)) as (url, _proc):
        with JetStreamStore(url, options={"user": "admin", "password": "admin-pass-word"}
                            ) as admin:
            admin.connect()
        with JetStreamStore(url, options={"user": "state", "password": "state-pass-word",
                                          "inbox_prefix": "_INBOX_state"}) as s:
            s.set(S1, "k", b"v")
            s.set(G, "g", b"w")
            assert s.get(S1, "k") == b"v"
            assert s.records() and s.usage(S1).scope_keys == 1
            assert s.drop_plugin("p") == 2


def test_group_commit_keeps_every_outcome_apart(jetstream_url: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads of one store share batches: a compare-and-set that lost fails alone, every
    write lands, and the count is exact."""

    bucket = f"grp{uuid.uuid4().hex[:10]}"
    store = JetStreamStore(jetstream_url, bucket=bucket)
    sizes: list[int] = []
    real = JetStreamStore._group_commit

    def counted(self: JetStreamStore, plugin: str, batch: list[object]) -> object:
        sizes.append(len(batch))
        return real(self, plugin, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(JetStreamStore, "_group_commit", counted)
    threads, rounds = 6, 8
    cas_counter_from_threads(store, threads, rounds, join_s=120)
    try:
        assert store.get(Scope("g"), "n") == str(threads * rounds).encode()
        for n in range(threads):
            assert store.get(Scope("g", f"s{n}"), "last") == str(rounds - 1).encode()
        assert max(sizes) > 1  # commits did share batches
        assert store.stats().conflicts > 0  # commits lost, each alone
        usage = store.usage(Scope("g", "s0"))
        assert usage.scope_keys == 1 and usage.plugin_bytes == sum(
            store.limits.entry_size(k, v) for k, v in
            [("n", str(threads * rounds).encode())]
            + [("last", str(rounds - 1).encode())] * threads)
    finally:
        store.close()


def test_tls_and_a_token_from_the_environment(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """[nats] tls_ca and $WASMEXT_NATS_TOKEN reach the store; without the CA the server
    is refused, with the token nowhere in the error."""
    if NATS_SERVER is None:
        pytest.skip(NO_NATS)
    from wasmext.config import load_config, open_store

    cert, key = self_signed_certificate(tmp_path)
    token = f"tok-{uuid.uuid4().hex}"
    conf = tmp_path / "tls.conf"
    conf.write_text(f'tls {{\n  cert_file = "{cert}"\n  key_file = "{key}"\n}}\n'
                    f'authorization {{ token = "{token}" }}\n')
    with nats_server("-c", str(conf)) as (url, _proc):
        tls_url = url.replace("nats://", "tls://")
        monkeypatch.setenv("WASMEXT_NATS_TOKEN", token)
        (tmp_path / "wasmext.toml").write_text(
            f'[state]\nbackend = "jetstream"\nurl = "{tls_url}"\n[nats]\ntls_ca = "server.pem"\n')
        with open_store(load_config(tmp_path / "wasmext.toml")) as s:
            s.set(S1, "k", b"v")
            assert s.get(S1, "k") == b"v"
        (tmp_path / "wasmext.toml").write_text(
            f'[state]\nbackend = "jetstream"\nurl = "{tls_url}"\n')
        with open_store(load_config(tmp_path / "wasmext.toml")) as s:
            with within(time.monotonic() + 2.0), pytest.raises(StateUnavailable) as info:
                s.get(S1, "k")
            assert "certificate" in info.value.message  # the reason, named
            assert token not in str(info.value)


def test_state_in_ever_more_sessions_is_a_named_quota_error_not_a_wedged_plugin(
        tmp_path: Path) -> None:
    """The plugin's accounting document holds one line per session with state: a plugin
    writing a tiny key into every session it sees must not grow it past max_payload (then
    every commit of the plugin, in any session, would fail as the host's storage fault)."""
    conf = tmp_path / "small.conf"
    conf.write_text("max_payload: 4096\n")
    with nats_server("-c", str(conf)) as (url, _):
        store = JetStreamStore(url, bucket=f"many{uuid.uuid4().hex[:10]}")
        try:
            started = time.monotonic()
            refused = None
            for i in range(200):  # ~60 bytes a session: 4 KiB holds well under 100
                try:
                    with within(time.monotonic() + 2):
                        store.set(Scope("p", f"session-{i:04d}"), "k", b"v")
                except QuotaExceeded as exc:
                    refused = (i, exc)
                    break
            assert time.monotonic() - started < 30
            assert refused is not None, "no session was refused"
            count, exc = refused
            assert 20 < count < 200 and "max_payload" in exc.message
            assert exc.plugin_id == "p"
            # the sessions that hold state keep working, and so does another plugin
            store.set(Scope("p", "session-0000"), "k2", b"w")
            assert store.get(Scope("p", "session-0000"), "k2") == b"w"
            store.set(Scope("q", "s"), "k", b"fine")
            assert store.get(Scope("q", "s"), "k") == b"fine"
            # ending sessions makes room again
            store.end_session("session-0001")
            store.set(Scope("p", f"session-{count:04d}"), "k", b"v")
            assert store.get(Scope("p", f"session-{count:04d}"), "k") == b"v"
        finally:
            store.close()


def test_many_reads_of_one_large_scope_fetch_its_document_once(
        store: JetStreamStore) -> None:
    """A plugin reading (and listing) many keys of a ~0.9 MiB scope in one call: the host
    fetches the scope's document once per transaction, not once per read (a read
    amplification the call's time budget alone would bound)."""
    txn = store.begin("p", "s1")
    for i in range(900):
        txn.set(f"k{i:04d}", b"x" * 900)
    txn.commit()
    fetched: list[int] = []
    get_many = store._b.get_many

    def counting(keys: Any) -> Any:
        fetched.append(len(keys))
        return get_many(keys)

    store._b.get_many = counting  # type: ignore[method-assign]
    started = time.monotonic()
    with store.begin("p", "s1") as txn:
        values = [txn.get(f"k{i:04d}") for i in range(300)]
        listed = [txn.keys(prefix="k00") for _ in range(50)]
        txn.set("k0000", b"own write")
        assert txn.get("k0000") == b"own write" and txn.get("missing") is None
    assert time.monotonic() - started < 10
    assert values == [b"x" * 900] * 300
    assert listed == [[f"k{i:04d}" for i in range(100)]] * 50
    assert sum(fetched) <= 8  # the scope once, plus the dry run's and the commit's reads
    assert store.get(S1, "k0000") == b"own write"
    assert store.get(Scope("q", "s1"), "k0001") is None  # another plugin sees none of it


def test_a_plugin_learns_only_that_storage_failed_not_where_it_is(tmp_path: Path) -> None:
    """State storage down: the guest's answer names no server address or error text (the
    host fault the application gets does, for the operator)."""
    import msgpack as mp
    import wasmtime

    from wasmext import Host, HostConfig
    from wasmext.sandbox.plugin import Plugin
    from wasmext.testing import DATA_AT, guest_wat

    port = free_port()  # nothing listens there
    request = mp.packb({"op": "state.get", "key": "k", "scope": "plugin"})
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(request)}))",
                    imports='(import "wasmext" "host_call" '
                            '(func $host_call (param i32 i32) (result i64)))',
                    data=request, memory_pages=4,
                    registration={"hooks": [{"hook": "test"}], "abi_minor": 1})
    config = HostConfig(data_dir=tmp_path, state_backend="jetstream",
                        state_url=f"nats://127.0.0.1:{port}")
    with Host(config, plugin_dirs=[]) as host:
        plugin = Plugin(host.runtime.compile(bytes(wasmtime.wat2wasm(wat)), "asker"),
                        plugin_id="asker", grants=frozenset({"state"}),
                        services=host.runtime.services)
        host.add(plugin)
        started = time.monotonic()
        with pytest.raises(StateUnavailable) as info:
            plugin.call("test")
        assert time.monotonic() - started < 5
        assert str(port) in info.value.message  # the operator's view names the server
        instance = plugin._idle[0]
        memory = bytes(instance.memory.read(0, instance.memory.size()))
        assert str(port).encode() not in memory and b"nats://" not in memory
        assert b"state storage is unavailable" in memory
        alive = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "alive"})))
        assert host.add(alive, plugin_id="healthy-one").call("test").value == "alive"


def _remote_call(services: Any, key: str, *, caller_s: float, commit_after_s: float) -> None:
    """A plugin call as a NATS worker runs one: under its caller's deadline (the root of
    its call tree, `caller_s` from now) and idempotency key, the plugin writing `key`;
    its guest returns and its commit starts `commit_after_s` after it began."""
    from wasmext.sandbox import calltree
    from wasmext.sandbox.codec import encode
    from wasmext.sandbox.hostcalls import CallContext
    from wasmext.sandbox.pluginlog import PluginLog
    from wasmext.services.state import applying

    started = time.monotonic()
    ctx = CallContext("p", frozenset({"state"}), {}, frozenset(), PluginLog("p", 10, 200),
                      session="s1")
    calltree.push(calltree.Frame(started + caller_s, 100, None))
    try:
        with applying(key):
            frame = calltree.enter(started, 5.0, 100)  # the plugin's own 5 s, clamped
            try:
                ctx.begin(frame.deadline)
                answer = services.dispatch(ctx, encode({"op": "state.set", "key": key,
                                                        "value": 1}), 32)
                assert answer == {"ok": True, "value": None}
                time.sleep(max(0.0, started + commit_after_s - time.monotonic()))
                ctx.finish(True)
            finally:
                calltree.leave(frame)
    finally:
        calltree.pop()


def test_a_remote_calls_commit_is_refused_once_its_callers_deadline_passed(
        jetstream_url: str) -> None:
    from wasmext.sandbox.hostcalls import HostServices
    from wasmext.services.state import install_state

    store = JetStreamStore(jetstream_url, bucket=f"late{uuid.uuid4().hex[:10]}")
    services = HostServices()
    install_state(services, lambda: store)
    try:
        # The guest returned in time, the commit would start 50 ms after the caller
        # gave up (and answered Timeout): refused, nothing written, now or later.
        started = time.monotonic()
        with pytest.raises(StateUnavailable, match="caller's deadline passed") as refused:
            _remote_call(services, "late", caller_s=0.3, commit_after_s=0.35)
        assert time.monotonic() - started < 3
        assert "nothing written" in refused.value.message
        time.sleep(0.2)
        assert store.get(S1, "late") is None
        # A commit that starts in time lands, once.
        _remote_call(services, "in-time", caller_s=5.0, commit_after_s=0.0)
        assert msgpack.unpackb(store.get(S1, "in-time")) == 1
        # An in-process call (no remote caller) still gets its commit floor past its end.
        from wasmext.sandbox import calltree
        from wasmext.sandbox.codec import encode
        from wasmext.sandbox.hostcalls import CallContext
        from wasmext.sandbox.pluginlog import PluginLog

        # Under a loaded CI machine one JetStream round trip can outlast the call's 50 ms
        # (the set's read: the op answers a timeout and stages nothing) or the 100 ms
        # floor itself (the commit waited its floor, and says so): such a try is tried
        # again; a refusal for the passed deadline fails at once.
        slow: list[str] = []
        for _ in range(3):
            ctx = CallContext("p", frozenset({"state"}), {}, frozenset(),
                              PluginLog("p", 10, 200), session="s1")
            frame = calltree.enter(time.monotonic(), 0.05, 100)
            try:
                ctx.begin(frame.deadline)
                answer = services.dispatch(ctx, encode({"op": "state.set", "key": "local",
                                                        "value": 2}), 32)
                if answer != {"ok": True, "value": None}:
                    slow.append(answer["error"]["message"])
                    ctx.finish(False)
                    continue
                time.sleep(0.06)
                ctx.finish(True)
                break
            except StateUnavailable as exc:
                slow.append(exc.message)
            finally:
                calltree.leave(frame)
        assert all("no answer to commit within" in why
                   or why == "the call's deadline passed before this state op"
                   for why in slow), slow
        assert len(slow) < 3, slow
        assert msgpack.unpackb(store.get(S1, "local")) == 2
    finally:
        store.close()


def test_a_group_commit_leaves_out_a_change_whose_caller_gave_up(jetstream_url: str) -> None:
    """A change queued for a batch that another call leads: its caller's deadline passed
    meanwhile (it raised StateUnavailable), so the batch writes everything else, not it."""
    from wasmext.state.accounting import Changes, Plan, Write
    from wasmext.state.jetstream.store import _Pending

    store = JetStreamStore(jetstream_url, bucket=f"grp{uuid.uuid4().hex[:10]}")
    try:
        now = time.time()
        with within(time.monotonic() + 0.05):  # queued by a remote call's thread
            late = _Pending(Changes("p", writes={("s1", "late"): Write(b"1", 60)}), now, None)
        with within(time.monotonic() + 30):
            fine = _Pending(Changes("p", writes={("s1", "fine"): Write(b"2", 60)}), now, None)
        local = _Pending(Changes("p", writes={("s1", "local"): Write(b"3", 60)}), now, None)
        time.sleep(0.1)  # the first caller gave up while another commit held the turn
        store._lead("p", [late, fine, local])
        assert isinstance(late.result, StateUnavailable)
        assert "nothing written" in late.result.message
        assert isinstance(fine.result, Plan) and isinstance(local.result, Plan)
        assert store.get(S1, "late") is None
        assert (store.get(S1, "fine"), store.get(S1, "local")) == (b"2", b"3")
    finally:
        store.close()
