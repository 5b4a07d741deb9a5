"""wasmext.toml, discovery, enable state, grants keyed to digests, async and
thread safety, and the wasmext_host fixture."""

from __future__ import annotations

import asyncio
import hashlib
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime

from support import Built, run_in_threads
from wasmext import ConfigError, Host, HostConfig, PluginError, load_config
from wasmext.config import open_store
from wasmext.testing import DATA_AT, guest_wat

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'


def plugin_folder(root: Path, pid: str, wat: str, extra: str = "") -> Path:
    folder = root / pid
    folder.mkdir(parents=True)
    (folder / f"{pid}.wasm").write_bytes(wasmtime.wat2wasm(wat))
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "1.0.0"\n{extra}')
    return folder


def write_config(tmp: Path, body: str) -> Path:
    path = tmp / "wasmext.toml"
    path.write_text(body)
    return path


def test_discovery_user_before_workspace_and_bad_plugins_skipped(tmp_path: Path) -> None:
    wat = guest_wat(hooks=("on_plain_text",))
    plugin_folder(tmp_path / "user", "shared-id", wat)
    plugin_folder(tmp_path / "work", "shared-id", wat)  # duplicate: reported, not loaded
    plugin_folder(tmp_path / "work", "good", wat)
    bad = plugin_folder(tmp_path / "work", "bad", wat)
    (bad / "plugin.toml").write_text('id = "Bad Id"\nversion = "1"\n')
    cfg = write_config(tmp_path, '[plugins]\nuser_dir = "user"\nworkspace_dir = "work"\n'
                                 '[host]\ndata_dir = "data"\n')
    with Host.from_config(cfg) as host:
        assert sorted(host.plugins) == ["good", "shared-id"]
        assert host.plugins["shared-id"].source == "user"
        reasons = " ".join(e.message for e in host.load_errors)
        assert "already used" in reasons
        assert "field 'id'" in reasons
        assert [e.plugin_id for e in host.ordered("on_plain_text")] == ["shared-id", "good"]


def test_symlinked_plugin_folder_is_refused(tmp_path: Path) -> None:
    real = plugin_folder(tmp_path / "elsewhere", "sneaky", guest_wat())
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "sneaky").symlink_to(real, target_is_directory=True)
    plugin_folder(tmp_path / "work", "escape", guest_wat())
    target = tmp_path / "secret.wasm"
    shutil.copy(tmp_path / "work" / "escape" / "escape.wasm", target)
    (tmp_path / "work" / "escape" / "escape.wasm").unlink()
    (tmp_path / "work" / "escape" / "escape.wasm").symlink_to(target)
    with Host(load_config(write_config(tmp_path, '[plugins]\nworkspace_dir = "work"\n'))) as h:
        assert h.plugins == {}
        messages = " ".join(e.message for e in h.load_errors)
        assert "is a symlink" in messages and "outside its plugin folder" in messages


def test_enable_state_persists(tmp_path: Path) -> None:
    plugin_folder(tmp_path / "work", "a", guest_wat())
    plugin_folder(tmp_path / "work", "b", guest_wat())
    cfg = write_config(tmp_path, '[host]\ndata_dir = "data"\nauto_enable = false\n'
                                 '[plugins]\nworkspace_dir = "work"\nenabled = ["a"]\n')
    with Host.from_config(cfg) as host:
        assert sorted(host.plugins) == ["a"]
        host.disable("a")
        host.enable("b")
        assert host.plugins == {}
    with Host.from_config(cfg) as again:
        assert sorted(again.plugins) == ["b"]


def test_grants_are_keyed_to_the_digest(tmp_path: Path) -> None:
    req = msgpack.packb({"op": "secret.get", "key": "token"})
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))",
                    imports=HOST_CALL, data=req)
    folder = plugin_folder(tmp_path / "work", "needs-secret", wat,
                           '[settings.token]\nsensitive = true\ndefault = "t0ken"\n')
    digest = hashlib.sha256((folder / "needs-secret.wasm").read_bytes()).hexdigest()
    body = ('[plugins]\nworkspace_dir = "work"\n[grants.needs-secret]\n'
            'digest = "sha256:{}"\ncapabilities = ["secrets"]\n')
    with Host(load_config(write_config(tmp_path, body.format(digest)))) as host:
        with host.session() as s:
            assert s.on_plain_text("x").value == "x"  # not registered for it: nothing ran
        assert host.plugins["needs-secret"].plugin.call("test").value == "t0ken"
    with Host(load_config(write_config(tmp_path, body.format("0" * 64)))) as host:
        with pytest.raises(PluginError) as info:
            host.plugins["needs-secret"].plugin.call("test")
        assert info.value.code == "denied"


@pytest.mark.parametrize(("body", "field", "why"), [
    ("[surprise]\n", "surprise", "unknown field"),
    ("[host]\nhooks = 1\n", "host.hooks", "must be true or false"),
    ("[plugins]\nenabled = ['Bad']\n", "plugins.enabled[0]", "not a plugin id"),
    ("[grants.x]\ndigest = 'md5:1'\n", "grants.x.digest", "64 lowercase hex digits"),
    ("[plugin.x]\nfailure = 'sometimes'\n", "plugin.x.failure", "'open', 'closed' or"),
    ("[limits]\nfuel_per_call = 0\n", "limits.fuel_per_call", "must be > 0"),
])
def test_config_errors_name_the_field(tmp_path: Path, body: str, field: str, why: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"field '{field}': ")) as caught:
        load_config(write_config(tmp_path, body))
    assert why in dict(caught.value.problems)[field]


def test_async_sessions_run_off_the_loop(built: Built, wasmext_host: Any) -> None:
    host = wasmext_host((built["test-kit"], {"plugin_id": "a", "settings": {"tag": "!"}}))

    async def main() -> list[str]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        async with host.asession() as s:
            results = await asyncio.gather(*(s.on_plain_text(str(i)) for i in range(20)))
        tick_task.cancel()
        assert ticks > 0
        return [r.value for r in results]

    assert asyncio.run(main()) == [f"{i}!" for i in range(20)]


def test_concurrent_sessions_are_independent(built: Built, wasmext_host: Any) -> None:
    host = wasmext_host((built["test-kit"], {"plugin_id": "a", "settings": {"tag": "+"}}),
                        guest_wat(hooks=("on_plain_text",), response={"ok": True}))

    def worker(n: int) -> None:
        with host.session(f"s{n}") as s:
            for i in range(50):
                assert s.on_plain_text(f"{n}-{i}").value == f"{n}-{i}+"
            assert all(e.plugin_id in ("a", "wat-1") for e in s.trace.events)

    assert run_in_threads(worker) == []


def test_secrets_never_reach_faults_traces_or_logs(tmp_path: Path, caplog: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "hunter2-very-secret"
    wat = guest_wat(response={"ok": False, "error": {"code": "failed",
                                                     "message": f"leaking {secret}"}},
                    hooks=("on_plain_text",))
    plugin_folder(tmp_path / "work", "leaky", wat,
                  '[settings.token]\nsensitive = true\nenv = "LEAKY_TOKEN"\n')
    monkeypatch.setenv("LEAKY_TOKEN", secret)
    with Host(load_config(write_config(tmp_path, '[plugins]\nworkspace_dir = "work"\n'
                                       '[plugin.leaky]\nenv = ["LEAKY_TOKEN"]\n'))
              ) as host, host.session() as s:
        s.on_plain_text("x")
        details = " ".join(str(e.detail) for e in s.trace.events)
        faults = " ".join(f.message for f in host.faults)
    assert secret not in details and secret not in faults and secret not in caplog.text
    assert "leaking ***" in faults


def test_events_metrics_and_runtime_events(built: Built, wasmext_host: Any) -> None:
    """Runtime events reach Python subscribers; every call is counted with its fuel."""
    host = wasmext_host((built["test-kit"], {"plugin_id": "kit", "settings": {"tag": "!"}}),
                        (built["test-kit"], {"plugin_id": "bad", "settings": {"mode": "trap"}}))
    seen: list[tuple[str, dict[str, Any]]] = []
    handle = host.observe.bus.subscribe("*", lambda e: seen.append((e.topic, e.payload)))
    with host.session("s1") as s:
        s.on_plain_text("x")
        s.middleware("tool_call", {"turn_id": "t", "step": 0, "call_id": "c", "tool": "calc",
                                   "args": {}, "metadata": {}}, lambda d: {"status": "ok"})
    assert host.observe.bus.flush(5)
    handle()
    topics = [t for t, _ in seen]
    assert topics[0] == "session.started" and "session.ended" in topics
    assert {"tool.called", "tool.completed", "plugin.faulted"} <= set(topics)
    faulted = next(p for t, p in seen if t == "plugin.faulted")
    assert (faulted["plugin_id"], faulted["reason"]) == ("bad", "trap")
    stats = host.observe.metrics.snapshot()
    assert stats["kit"]["calls"] == 1 and stats["kit"]["fuel"] > 0
    assert stats["bad"]["faults"] == 1
    text = host.observe.metrics.exposition().decode()
    assert 'extension_callback_total{callback_type="on_plain_text",extension_id="kit",' \
           'outcome="ok"} 1.0' in text


def test_plugins_emit_and_subscribe_only_with_grants(wasmext_host: Any) -> None:
    req = msgpack.packb({"op": "event.emit", "topic": "audit.login", "payload": {"u": 1}})
    emitter = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(req)}))",
                        imports=HOST_CALL, data=req, hooks=("on_plain_text",))
    listener = guest_wat(registration={"hooks": [{"hook": "on_event"}],
                                       "subscriptions": ["audit.*"]},
                         response={"ok": True})
    host = wasmext_host(
        (emitter, {"plugin_id": "emitter", "grants": {"events", "emit:audit.*"}}),
        (emitter, {"plugin_id": "no-grant", "grants": {"events"}}),
        (listener, {"plugin_id": "listener", "grants": {"events", "subscribe:audit.*"}}),
        (listener, {"plugin_id": "deaf", "grants": {"events"}}))
    with host.session() as s:
        s.on_plain_text("go")
        failures = {e.plugin_id: e.detail for e in s.trace.events if e.outcome == "failed"}
    assert host.observe.bus.flush(5)
    assert host.plugins["listener"].plugin.calls == 1  # the one event
    assert host.plugins["deaf"].plugin.calls == 0      # its subscription was refused at load
    assert "denied" in str(failures.get("no-grant"))
    assert any("deaf" in (e.plugin_id or "") for e in host.load_errors)


def test_mcp_servers_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            caplog: Any) -> None:
    monkeypatch.setenv("CALC_TOKEN", "t0k")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    cfg = load_config(write_config(tmp_path, """
[mcp.servers.calc]
command = "python"
args = ["calc.py", "--token=${CALC_TOKEN}"]
env = { KEY = "${NOT_SET_ANYWHERE}", LIT = "$${x}" }
call_timeout_s = 5
[mcp.servers.remote]
transport = "http"
url = "http://127.0.0.1:9/mcp"
enabled = false
"""))
    calc, remote = cfg.mcp_servers
    assert (calc.name, calc.transport, calc.args) == ("calc", "stdio", ("calc.py", "--token=t0k"))
    assert calc.env == {"KEY": "", "LIT": "${x}"} and calc.call_timeout_s == 5.0
    assert "NOT_SET_ANYWHERE" in caplog.text
    assert (remote.transport, remote.enabled) == ("http", False)


@pytest.mark.parametrize(("body", "field", "why"), [
    ("[mcp.servers.x]\ntransport = 'smoke'\n", "mcp.servers.x.transport", "'stdio', 'sse'"),
    ("[mcp.servers.x]\ntransport = 'stdio'\n", "mcp.servers.x.command", "needs a command"),
    ("[mcp.servers.x]\ntransport = 'sse'\n", "mcp.servers.x.url", "needs a url"),
    ("[mcp.servers.x]\ncommand = 'a'\ncall_timeout_s = -1\n", "mcp.servers.x.call_timeout_s",
     "must be > 0"),
    ("[mcp]\nenabled = 'yes'\n", "mcp.enabled", "must be true or false"),
])
def test_mcp_config_errors(tmp_path: Path, body: str, field: str, why: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"field '{field}': ")) as caught:
        load_config(write_config(tmp_path, body))
    assert why in dict(caught.value.problems)[field]


@pytest.mark.parametrize(("backend", "client", "url"), [
    ("redis", "redis", "redis://127.0.0.1:1/0"), ("jetstream", "nats", "nats://127.0.0.1:1")])
def test_a_state_backend_without_its_client_names_the_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, client: str,
        url: str) -> None:
    """`[state] backend = "redis"` in a plain `pip install wasmext`: one config error saying
    what to install, not "unexpected ModuleNotFoundError: No module named 'redis'"."""
    for name in list(sys.modules):
        if name.split(".")[0] == client or name.startswith(f"wasmext.state.{backend}"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, client, None)  # an import of it fails, as uninstalled
    with pytest.raises(ConfigError) as missing:
        open_store(HostConfig(data_dir=tmp_path, state_backend=backend, state_url=url))
    extra = "redis" if backend == "redis" else "nats"
    assert missing.value.message == (f"[state] backend needs the {extra} extra (module "
                                     f"{client} is not installed): pip install "
                                     f"'wasmext[{extra}]'")
