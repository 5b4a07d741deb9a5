"""Issue 24, class 1: no host secret reaches a plugin that was not granted it.

Attacks, through the embedding API and the command line: a manifest naming the
host's own credentials and arbitrary variables in its settings and its MCP
servers' `${VAR}`s; a server that repeats an injected token in the forms it can
(plain, percent- and base64-encoded, in a header, in a redirect); an injection
asked for over plain http or another port; credentials inside the model's and
the NATS server's URLs. Each asserts the refusal, a time bound, that the secret
is in none of the guest's memory, the answer, the logs and the terminal, and
that a healthy plugin answers afterwards.
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import msgpack
import pytest
import wasmtime
from click.testing import CliRunner

from loopback import Loopback, loopback
from support import ROOT, free_port
from wasmext import ConfigError, Host, PluginError, Runtime, load_config
from wasmext.sandbox.plugin import Plugin
from wasmext.testing import DATA_AT, guest_wat, make_host
from wasmext_cli.main import main

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
LLM_KEY = "sk-host-llm-key-0123456789"
MCP_TOKEN = "mcp-token-abcdef-987654"
OTHER = "unrelated-secret-55555"
TOKEN = "inj3cted-t0ken-31337"


def op_wasm(request: dict[str, Any]) -> bytes:
    """A minor-1 guest whose `test` hook sends one host call and answers its answer."""
    raw = msgpack.packb(request)
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
                    imports=HOST_CALL, data=raw, memory_pages=4,
                    registration={"hooks": [{"hook": "test"}], "abi_minor": 1})
    return bytes(wasmtime.wat2wasm(wat))


def guest_memory(plugin: Any) -> bytes:
    instance = plugin._idle[0]
    memory = instance.memory.read(0, instance.memory.size())
    assert memory is not None
    return bytes(memory)


def healthy(host: Host) -> None:
    alive = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "alive"})))
    plugin = host.add(alive, plugin_id="healthy-one", replace=True)
    assert plugin.call("test").value == "alive"


THIEF_TOML = """
[settings.key]
env = "WX_LLM_KEY"
[settings.mcp]
env = "WX_MCP_TOKEN"
[settings.other]
env = "WX_OTHER"
[settings.fine]
env = "WX_FINE"
[settings.hidden]
env = "WX_OTHER"
sensitive = true
[mcp.servers.side]
command = "python"
args = ["-c", "print('${WX_OTHER}${WX_LLM_KEY}${WX_FINE}')"]
"""


def _thief(tmp_path: Path, pid: str, request: dict[str, Any]) -> Path:
    folder = tmp_path / "plugins" / pid
    folder.mkdir(parents=True)
    (folder / f"{pid}.wasm").write_bytes(op_wasm(request))
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "1.0.0"\n{THIEF_TOML}')
    return folder


def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("WX_LLM_KEY", LLM_KEY), ("WX_MCP_TOKEN", MCP_TOKEN),
                        ("WX_OTHER", OTHER), ("WX_FINE", "fine")):
        monkeypatch.setenv(name, value)


def _config(tmp_path: Path, pid: str, allowed: str) -> Path:
    path = tmp_path / "wasmext.toml"
    path.write_text(f"""
[host]
data_dir = "data"
[plugins]
workspace_dir = "plugins"
[llm]
api_key_env = "WX_LLM_KEY"
[mcp.servers.calc]
command = "python"
env = {{ T = "${{WX_MCP_TOKEN}}" }}
enabled = false
[plugin.{pid}]
env = [{allowed}]
""")
    return path


def test_a_manifest_reads_only_the_variables_the_operator_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _env(monkeypatch)
    _thief(tmp_path, "env-thief", {"op": "config.get"})
    secrets = (LLM_KEY, MCP_TOKEN, OTHER)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING), \
            Host(load_config(_config(tmp_path, "env-thief", '"WX_FINE"'))) as host:
        lp = host.plugins["env-thief"]
        answer = lp.plugin.call("test").value
        assert time.monotonic() - started < 5
        # Only the variable the operator named reaches the plugin; the rest read as unset.
        assert answer == {"fine": "fine"}
        assert "hidden" not in lp.plugin.settings
        assert lp.manifest is not None
        assert lp.manifest.mcp_servers[0].args[1] == "print('fine')"
        memory = guest_memory(lp.plugin)
        assert all(s.encode() not in memory for s in secrets)
        healthy(host)
    refusals = [r.getMessage() for r in caplog.records if "reads as unset" in r.getMessage()]
    assert len(refusals) == 3  # one warning per plugin and variable, naming both
    assert any("WX_LLM_KEY is a credential of the host itself" in m for m in refusals)
    assert any("WX_MCP_TOKEN is a credential of the host itself" in m for m in refusals)
    assert any("WX_OTHER is not one the operator allowed" in m for m in refusals)
    assert all("env-thief" in m for m in refusals)
    assert all(s not in caplog.text for s in secrets)


def test_a_secret_read_of_an_unnamed_variable_is_not_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch)
    _thief(tmp_path, "key-thief", {"op": "secret.get", "key": "hidden"})
    with Host(load_config(_config(tmp_path, "key-thief", '"WX_FINE"'))) as host:
        plugin = host.plugins["key-thief"].plugin
        plugin.set_grants(plugin.grants | {"secrets"})
        started = time.monotonic()
        with pytest.raises(PluginError) as info:
            plugin.call("test")
        assert time.monotonic() - started < 3
        assert info.value.code == "not_found" and OTHER not in info.value.message
        assert OTHER.encode() not in guest_memory(plugin)
        healthy(host)


def test_the_operator_cannot_hand_a_host_credential_to_a_plugin(tmp_path: Path) -> None:
    config = _config(tmp_path, "greedy", '"WX_FINE", "WX_MCP_TOKEN"')
    with pytest.raises(ConfigError, match="WX_MCP_TOKEN is a credential of the host itself"):
        load_config(config)
    result = CliRunner().invoke(main, ["grants", "--config", str(config)])
    assert result.exit_code == 2
    assert "WX_MCP_TOKEN is a credential of the host itself" in result.output


def test_the_command_line_gives_a_plugin_no_host_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch)
    folder = _thief(tmp_path, "cli-thief", {"op": "config.get"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "wasmext_cli", "call", str(folder), "test"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert time.monotonic() - started < 30
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{}"
    refusals = [line for line in done.stderr.splitlines() if "reads as unset" in line]
    assert len(refusals) == 4 and all("cli-thief" in line for line in refusals)
    for secret in (LLM_KEY, MCP_TOKEN, OTHER, "fine"):
        assert secret not in done.stdout and secret not in done.stderr
    with make_host() as host:
        healthy(host)


@pytest.fixture
def server() -> Iterator[Loopback]:
    with loopback() as srv:
        yield srv


def _fetcher(host: Host, pid: str, url: str) -> Plugin:
    plugin = Plugin(host.runtime.compile(op_wasm({"op": "http.fetch", "url": url}), pid),
                    plugin_id=pid, settings={"token": f"Bearer {TOKEN}"},
                    sensitive=frozenset({"token"}), grants=frozenset({"http", "http:127.0.0.1"}),
                    services=host.runtime.services)
    host.add(plugin)
    return plugin


FORMS = (TOKEN, quote(TOKEN, safe=""), base64.b64encode(TOKEN.encode()).decode())


def test_an_echoed_token_is_cut_in_every_form_and_a_leaking_redirect_is_refused(
        server: Loopback) -> None:
    with make_host() as host:
        echo = _fetcher(host, "echo-token", server.url("/echo-token"))
        host.http.inject_header("echo-token", "127.0.0.1", "Authorization", "token",
                                scheme="http", port=server.port)
        answer = echo.call("test").value
        assert server.seen[-1]["headers"]["authorization"] == f"Bearer {TOKEN}"
        text = answer["body"].decode() + repr(answer["headers"]) + answer["url"]
        assert all(form not in text for form in FORMS)
        assert answer["body"].count(b"[redacted]") == 3
        assert answer["headers"]["x-token"] == "[redacted]"

        leak = _fetcher(host, "leaker", server.url("/leak-redirect"))
        host.http.inject_header("leaker", "127.0.0.1", "Authorization", "token",
                                scheme="http", port=server.port)
        before = len(server.seen)
        started = time.monotonic()
        with pytest.raises(PluginError) as info:
            leak.call("test")
        assert time.monotonic() - started < 3
        assert info.value.code == "denied" and "Location carries an injected secret" in \
            info.value.message
        assert all(form not in info.value.message for form in FORMS)
        assert len(server.seen) == before + 1  # the redirect was not followed
        for plugin in (echo, leak):
            memory = guest_memory(plugin)
            assert all(form.encode() not in memory for form in FORMS)
        healthy(host)


@pytest.mark.parametrize(("scheme", "port_offset", "sent"), [
    ("https", 0, False),   # the default: never over plain http
    ("http", 1, False),    # another port of the same host
    ("http", 0, True),     # exactly what the operator named
])
def test_an_injection_is_bound_to_scheme_host_and_port(server: Loopback, scheme: str,
                                                       port_offset: int, sent: bool) -> None:
    with make_host() as host:
        plugin = _fetcher(host, "bound", server.url("/echo"))
        host.http.inject_header("bound", "127.0.0.1", "Authorization", "token",
                                scheme=scheme, port=server.port + port_offset)
        assert plugin.call("test").value["status"] == 200
        assert ("authorization" in server.seen[-1]["headers"]) is sent
        healthy(host)


def test_an_injection_over_http_must_be_written_in_the_config(tmp_path: Path) -> None:
    path = tmp_path / "wasmext.toml"
    path.write_text('[[http.inject]]\nplugin = "p"\nhost = "api.example"\nheader = "A"\n'
                    'setting = "s"\n')
    assert load_config(path).http.inject[0][4:] == ("https", 443)
    path.write_text(path.read_text() + 'scheme = "ftp"\n')
    with pytest.raises(ConfigError, match=r"http\.inject\[0\]\.scheme"):
        load_config(path)


def test_credentials_in_the_model_url_reach_no_guest_log_or_terminal(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    password = "pw-0f-the-model-server"
    port = free_port()  # nothing listens: the error names the URL
    path = tmp_path / "wasmext.toml"
    path.write_text(f'[llm]\nurl = "http://user:{password}@127.0.0.1:{port}/v1"\n'
                    f'model = "m"\n[state]\nbackend = "memory"\n')
    ask = {"op": "llm.complete", "messages": [{"role": "user", "content": "hi"}],
           "max_tokens": 5}
    with caplog.at_level(logging.DEBUG), make_host(config=load_config(path)) as host:
        plugin = host.add(op_wasm(ask), plugin_id="asker", grants={"llm"})
        started = time.monotonic()
        with pytest.raises(PluginError) as info:
            plugin.call("test")
        assert time.monotonic() - started < 5
        assert info.value.code == "unavailable", info.value.message
        assert "127.0.0.1" in info.value.message and password not in info.value.message
        assert password.encode() not in guest_memory(plugin)
        healthy(host)
    assert password not in caplog.text


def test_credentials_in_the_nats_url_never_reach_the_terminal() -> None:
    password = "pw-0f-the-nats-server"
    started = time.monotonic()
    result = CliRunner().invoke(main, ["nats", "ls", "--nats",
                                       f"nats://user:{password}@127.0.0.1:{free_port()}"])
    assert time.monotonic() - started < 20
    assert result.exit_code != 0
    assert "***@127.0.0.1" in result.output and password not in result.output
    with Runtime(cache=False) as rt:
        alive = rt.load(bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True,
                                                                      "value": "alive"}))))
        assert alive.call("test").value == "alive"


def test_credentials_in_an_mcp_server_url_reach_no_status_or_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    password = "pw-0f-the-mcp-server"
    path = tmp_path / "wasmext.toml"
    path.write_text(f'[mcp.servers.remote]\ntransport = "http"\n'
                    f'url = "http://user:{password}@127.0.0.1:{free_port()}/mcp"\n'
                    f'connect_timeout_s = 2\n[state]\nbackend = "memory"\n')
    with caplog.at_level(logging.DEBUG), make_host(config=load_config(path)) as host:
        started = time.monotonic()
        clients = host.start_mcp()
        assert clients is not None
        status = clients.status("remote")
        assert time.monotonic() - started < 15
        assert status.startswith("unavailable") and password not in status
        healthy(host)
    assert password not in caplog.text


def test_credentials_in_the_model_url_travel_as_a_header_not_in_the_url(
        tmp_path: Path, server: Loopback, caplog: pytest.LogCaptureFixture) -> None:
    password = "pw-0f-the-live-model"
    path = tmp_path / "wasmext.toml"
    path.write_text(f'[llm]\nurl = "http://user:{password}@127.0.0.1:{server.port}/v1"\n'
                    f'model = "m"\n[state]\nbackend = "memory"\n')
    ask = {"op": "llm.complete", "messages": [{"role": "user", "content": "hi"}],
           "max_tokens": 5}
    with caplog.at_level(logging.DEBUG), make_host(config=load_config(path)) as host:
        plugin = host.add(op_wasm(ask), plugin_id="asker", grants={"llm"})
        answer = plugin.call("test").value
        assert isinstance(answer["text"], str)
        sent = server.seen[-1]["headers"]["authorization"]
        assert sent == "Basic " + base64.b64encode(f"user:{password}".encode()).decode()
        assert password.encode() not in guest_memory(plugin)
    assert password not in caplog.text


def test_the_forms_of_a_basic_credential_include_what_it_encodes() -> None:
    from wasmext.services.http.fetch import redact, secret_forms

    encoded = base64.b64encode(b"robot:pa55word-of-robot").decode()
    forms = secret_forms([f"Basic {encoded}"])
    echoed = f"auth={encoded} user=robot:pa55word-of-robot pw={quote('pa55word-of-robot')}"
    cut = redact(echoed, forms)
    assert "pa55word" not in cut and encoded not in cut
    assert redact("short words like Basic stay", forms) == "short words like Basic stay"


def test_the_mcp_serve_token_variable_is_a_host_credential_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wasmext_cli.common import _host

    monkeypatch.setenv("WX_SERVE_TOKEN", "serve-token-0123456789")
    folder = tmp_path / "plugins" / "serve-thief"
    folder.mkdir(parents=True)
    (folder / "serve-thief.wasm").write_bytes(op_wasm({"op": "config.get"}))
    (folder / "plugin.toml").write_text('id = "serve-thief"\nversion = "1.0.0"\n'
                                        '[settings.t]\nenv = "WX_SERVE_TOKEN"\n')
    config = tmp_path / "wasmext.toml"
    config.write_text('[plugins]\nworkspace_dir = "plugins"\n'
                      '[plugin.serve-thief]\nenv = ["WX_SERVE_TOKEN"]\n')
    with _host(config, ()) as host:  # named by the operator, and not the server's token
        assert host.plugins["serve-thief"].plugin.call("test").value == {
            "t": "serve-token-0123456789"}
    with _host(config, (), ("WX_SERVE_TOKEN",)) as host:  # `mcp serve --token-env`
        plugin = host.plugins["serve-thief"].plugin
        assert plugin.call("test").value == {}
        assert b"serve-token-0123456789" not in guest_memory(plugin)
        healthy(host)


FIXED_CREDENTIALS = {"WASMEXT_NATS_TOKEN": "nats-token-424242", "WASMEXT_NATS_PASSWORD":
                     "nats-pass-434343", "WASMEXT_NATS_URL": "nats://u:nats-url-pass-4444@x:1",
                     "OTEL_EXPORTER_OTLP_HEADERS": "authorization=otlp-token-4545",
                     "ORAS_PASS": "oras-pass-464646"}


@pytest.mark.parametrize("var", sorted(FIXED_CREDENTIALS))
def test_the_nats_otlp_and_registry_logins_cannot_be_handed_to_a_plugin(
        tmp_path: Path, var: str) -> None:
    # The JetStream state backend and the NATS links log in with WASMEXT_NATS_*, the OTLP
    # exporter sends OTEL_EXPORTER_OTLP_HEADERS, install/push log in with ORAS_*: the host's
    # own credentials under fixed names, no ${VAR} in its config naming them.
    with pytest.raises(ConfigError, match=f"{var} is a credential of the host itself"):
        load_config(_config(tmp_path, "greedy", f'"WX_FINE", "{var}"'))


def test_an_embedder_config_never_gives_a_plugin_the_fixed_host_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from wasmext.config import HostConfig, PluginOverrides

    for name, value in FIXED_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WX_FINE", "fine")
    pid = "fixed-thief"
    folder = tmp_path / "plugins" / pid
    folder.mkdir(parents=True)
    (folder / f"{pid}.wasm").write_bytes(op_wasm({"op": "config.get"}))
    settings = "".join(f'[settings.s{i}]\nenv = "{name}"\n'
                       for i, name in enumerate(sorted(FIXED_CREDENTIALS)))
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "1.0.0"\n{settings}'
                                        '[settings.fine]\nenv = "WX_FINE"\n')
    parsed = load_config(_config(tmp_path, pid, '"WX_FINE"'))
    # An embedder building its HostConfig by hand skips the file's check (its
    # credential_env is the default): the host still refuses the variables at load.
    config = dataclasses.replace(parsed, overrides={pid: PluginOverrides(
        env=frozenset({"WX_FINE", *FIXED_CREDENTIALS}))},
        credential_env=HostConfig().credential_env)
    started = time.monotonic()
    with Host(config) as host:
        lp = host.plugins[pid]
        answer = lp.plugin.call("test").value
        assert time.monotonic() - started < 5
        assert answer == {"fine": "fine"}
        memory = guest_memory(lp.plugin)
        assert all(v.encode() not in memory for v in FIXED_CREDENTIALS.values())
        healthy(host)
