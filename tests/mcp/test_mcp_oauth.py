"""OAuth on MCP client connections, against real OAuth-protected MCP servers (the
official SDK's server and authorization server, see oauth_support): the named 401
without an oauth table, the authorization code flow over streamable HTTP and SSE,
the token file (0600) reused by the next connection, a corrupt one re-authorized,
an expired one refreshed, client credentials from ${VAR}s, and the hostile cases."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from oauth_support import SCOPE, client_credentials_mcp, free_port, oauth_mcp, robot_config

from wasmext.config import load_config
from wasmext.mcp.client.connections import McpClients
from wasmext.mcp.client.spec import ServerSpec
from wasmext.mcp.oauth.config import OAuthSettings
from wasmext.services.tools import ToolRegistry
from wasmext.testing import make_host


class Operator:
    """The person at the terminal: opens each address wasmext prints, in a browser
    that follows redirects (to the loopback listener), unless told to stay away."""

    def __init__(self, visit: bool = True) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.visit = visit

    def __call__(self, server: str, url: str, callback: str) -> None:
        self.seen.append((server, url, callback))
        if self.visit:
            threading.Thread(target=self._open, args=(url,), daemon=True).start()

    @staticmethod
    def _open(url: str) -> None:
        with contextlib.suppress(OSError):  # the test sees what wasmext made of it
            urllib.request.urlopen(url, timeout=10).read()


@pytest.fixture
def registry() -> Iterator[ToolRegistry]:
    host = make_host()
    try:
        yield host.tools
    finally:
        host.close()


def connect(registry: ToolRegistry, folder: Path, spec: ServerSpec, operator: Operator
            ) -> McpClients:
    clients = McpClients(registry)
    clients.oauth_dir = folder
    clients.authorize_prompt = operator
    clients.start([spec])
    return clients


def code_flow(port: int | None = None, **kw: object) -> OAuthSettings:
    kw.setdefault("redirect_uri", f"http://127.0.0.1:{port or free_port()}/callback")
    return OAuthSettings(scopes=(SCOPE,), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_without_oauth_the_401_is_named(registry: ToolRegistry, tmp_path: Path,
                                        transport: str) -> None:
    with oauth_mcp(transport) as (url, provider):
        clients = connect(registry, tmp_path, ServerSpec("guarded", transport, url=url),
                          Operator())
        try:
            status = clients.status("guarded")
            assert "HTTP 401" in status and "[mcp.servers.guarded.oauth]" in status, status
            assert "guarded__add" not in registry.tools
        finally:
            clients.stop()
        assert provider.authorizations == 0


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_authorization_code_flow_then_the_token_file_is_reused(
        registry: ToolRegistry, tmp_path: Path, transport: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    folder = tmp_path / "mcp-oauth"
    with oauth_mcp(transport) as (url, provider):
        spec = ServerSpec("guarded", transport, url=url, oauth=code_flow())
        operator = Operator()
        clients = connect(registry, folder, spec, operator)
        try:
            assert clients.status("guarded") == "connected", clients.status("guarded")
            assert registry.execute("guarded__add", {"a": 2, "b": 3}) == \
                {"status": "ok", "output": {"result": 5}}
        finally:
            clients.stop()
        assert provider.authorizations == 1 and len(provider.clients) == 1
        assert [(s, c) for s, _, c in operator.seen] == [("guarded", "loopback")]
        assert operator.seen[0][1].startswith(url.rsplit("/", 1)[0] + "/authorize?")
        token_file = folder / "guarded.json"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        saved = json.loads(token_file.read_text())
        assert saved["url"] == url and saved["tokens"]["access_token"] in provider.access
        secrets = (saved["tokens"]["access_token"], saved["tokens"]["refresh_token"])
        assert not any(s in r.getMessage() for r in caplog.records for s in secrets)

        again = Operator()
        clients = connect(registry, folder, spec, again)  # a restart: only the file is left
        try:
            assert clients.status("guarded") == "connected", clients.status("guarded")
            assert registry.execute("guarded__add", {"a": 1, "b": 1})["status"] == "ok"
        finally:
            clients.stop()
        assert again.seen == [] and provider.authorizations == 1 and len(provider.clients) == 1


@pytest.mark.parametrize("damage", [b"", b'{"format": 1, "url": "', b"\x00\xff" * 50,
                                    b'{"format": 1, "url": "http://elsewhere/mcp", '
                                    b'"tokens": {"access_token": "x"}, "client": null}'])
def test_a_damaged_token_file_means_authorizing_again(registry: ToolRegistry, tmp_path: Path,
                                                      damage: bytes) -> None:
    with oauth_mcp("http") as (url, provider):
        spec = ServerSpec("guarded", "http", url=url, oauth=code_flow())
        connect(registry, tmp_path, spec, Operator()).stop()
        assert provider.authorizations == 1
        (tmp_path / "guarded.json").write_bytes(damage)
        operator = Operator()
        clients = connect(registry, tmp_path, spec, operator)
        try:
            assert clients.status("guarded") == "connected", clients.status("guarded")
            assert registry.execute("guarded__add", {"a": 4, "b": 4})["status"] == "ok"
        finally:
            clients.stop()
        assert len(operator.seen) == 1 and provider.authorizations == 2
        assert json.loads((tmp_path / "guarded.json").read_text())["url"] == url


def test_an_expired_token_is_refreshed_without_the_operator(registry: ToolRegistry,
                                                            tmp_path: Path) -> None:
    with oauth_mcp("http") as (url, provider):
        spec = ServerSpec("guarded", "http", url=url, oauth=code_flow())
        connect(registry, tmp_path, spec, Operator()).stop()
        token_file = tmp_path / "guarded.json"
        saved = json.loads(token_file.read_text())
        saved["expires_at"] = time.time() - 60  # as if wasmext restarted an hour later
        token_file.write_text(json.dumps(saved))
        operator = Operator()
        clients = connect(registry, tmp_path, spec, operator)
        try:
            assert clients.status("guarded") == "connected", clients.status("guarded")
        finally:
            clients.stop()
        assert operator.seen == [] and provider.refreshes == 1
        assert provider.authorizations == 1
        assert json.loads(token_file.read_text())["tokens"]["access_token"] != \
            saved["tokens"]["access_token"]


def test_the_code_pasted_on_stdin(registry: ToolRegistry, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    read_end, write_end = os.pipe()
    monkeypatch.setattr(sys, "stdin", os.fdopen(read_end, "r"))
    redirect = f"http://127.0.0.1:{free_port()}/done"  # nothing listens there

    class NoRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kw: object) -> None:
            return None

    def paste(server: str, url: str, callback: str) -> None:
        assert callback == "stdin"

        def go() -> None:
            try:
                urllib.request.build_opener(NoRedirects).open(url, timeout=10)
            except urllib.error.HTTPError as answer:  # the 302 the browser would follow
                os.write(write_end, (answer.headers["Location"] + "\n").encode())
        threading.Thread(target=go, daemon=True).start()

    with oauth_mcp("http") as (url, provider):
        spec = ServerSpec("guarded", "http", url=url,
                          oauth=code_flow(redirect_uri=redirect, callback="stdin"))
        clients = McpClients(registry)
        clients.oauth_dir, clients.authorize_prompt = tmp_path, paste
        clients.start([spec])
        try:
            assert clients.status("guarded") == "connected", clients.status("guarded")
        finally:
            clients.stop()
            os.close(write_end)
        assert provider.authorizations == 1


def test_client_credentials_from_env_through_the_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("ROBOT_ID", "robot-7")
    monkeypatch.setenv("ROBOT_SECRET", "s3cret-value-0123")
    with client_credentials_mcp("robot-7", "s3cret-value-0123") as (url, issuer, grantor):
        config = robot_config(tmp_path, url, issuer)
        cfg = load_config(config)
        assert "s3cret" not in repr(cfg)
        for _ in range(2):
            with make_host(config=cfg) as host:
                clients = host.start_mcp()
                assert clients is not None
                assert clients.status("robot") == "connected", clients.status("robot")
                assert host.tools.execute("robot__add", {"a": 20, "b": 22}) == \
                    {"status": "ok", "output": {"result": 42}}
        assert grantor.grants == 1  # the second host read the token file
        token_file = tmp_path / "data" / "mcp-oauth" / "robot.json"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600

        monkeypatch.setenv("ROBOT_SECRET", "not-the-secret")
        token_file.unlink()
        with make_host(config=load_config(config)) as host:
            clients = host.start_mcp()
            assert clients is not None
            status = clients.status("robot")
            assert status.startswith("unavailable: ") and "robot" in status, status
            assert "not-the-secret" not in status and "s3cret" not in status
            assert "\x1b" not in status and "\u202e" not in status and len(status) < 400
        logged = caplog.text
        assert "wrong secret" in logged  # the SDK logged the server's words, cleaned:
        assert "\x1b" not in logged and "\u202e" not in logged and "\x07" not in logged


def test_hostile_authorization_server_words_are_cleaned_and_bounded(
        registry: ToolRegistry, tmp_path: Path) -> None:
    with oauth_mcp("http") as (url, provider):
        provider.error = "\x1b]8;;http://evil\x07click\u202e" + "x" * 5000
        spec = ServerSpec("guarded", "http", url=url, oauth=code_flow())
        clients = connect(registry, tmp_path, spec, Operator())
        try:
            status = clients.status("guarded")
            assert "the authorization server refused: access_denied" in status, status
            assert "\x1b" not in status and "\u202e" not in status and "\x07" not in status
            assert len(status) < 400
            provider.error = None  # the server comes round: the next attempt gets in
            deadline = time.monotonic() + 20
            while clients.status("guarded") != "connected" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert registry.execute("guarded__add", {"a": 1, "b": 2})["status"] == "ok"
        finally:
            clients.stop()


def test_nobody_authorizes_in_time_then_someone_does(registry: ToolRegistry,
                                                     tmp_path: Path) -> None:
    with oauth_mcp("http") as (url, provider):
        spec = ServerSpec("guarded", "http", url=url,
                          oauth=code_flow(authorize_timeout_s=0.5))
        operator = Operator(visit=False)
        started = time.monotonic()
        clients = connect(registry, tmp_path, spec, operator)
        try:
            assert "nobody authorized wasmext within 0.5 s" in clients.status("guarded")
            assert provider.authorizations == 0
            assert time.monotonic() - started < 15  # bounded, not the 300 s default
            operator.visit = True  # the next attempt (after the backoff) is approved
            deadline = time.monotonic() + 20
            while clients.status("guarded") != "connected" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert registry.execute("guarded__add", {"a": 1, "b": 2})["status"] == "ok"
        finally:
            clients.stop()
        assert provider.authorizations == 1


def test_a_taken_callback_port_is_named(registry: ToolRegistry, tmp_path: Path) -> None:
    with socket.socket() as taken, oauth_mcp("http") as (url, _):
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        spec = ServerSpec("guarded", "http", url=url, oauth=code_flow(port))
        clients = connect(registry, tmp_path, spec, Operator())
        try:
            status = clients.status("guarded")
            assert f"cannot listen on 127.0.0.1:{port} for the OAuth callback" in status, status
        finally:
            clients.stop()


def test_stdio_servers_take_no_oauth() -> None:
    from wasmext.errors import ConfigError

    with pytest.raises(ConfigError, match="oauth is only for sse and http servers"):
        ServerSpec("calc", "stdio", command="python", oauth=OAuthSettings())


def docs_oauth_example() -> str:
    text = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text()
    section = text[text.index("### OAuth for sse and http servers"):]
    start = section.index("```toml\n") + 8
    return section[start:section.index("\n```", start)]


def test_the_docs_example_runs(registry: ToolRegistry, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    example = docs_oauth_example()
    monkeypatch.setenv("ROBOT_CLIENT_ID", "robot-1")
    monkeypatch.setenv("ROBOT_CLIENT_SECRET", "robot-secret-0123")
    with oauth_mcp("http") as (notes_url, provider), \
            client_credentials_mcp("robot-1", "robot-secret-0123") as (robot_url, issuer, grantor):
        live = (example.replace("https://notes.example.com/mcp", notes_url)
                .replace("33418", str(free_port()))
                .replace("https://robot.example.com/mcp", robot_url)
                .replace("https://auth.example.com", issuer))
        assert live.count("127.0.0.1") >= 3  # every address was replaced
        config = tmp_path / "wasmext.toml"
        config.write_text(f"[host]\ndata_dir = \"{tmp_path / 'data'}\"\n{live}")
        specs = [ServerSpec.from_config(c) for c in load_config(config).mcp_servers]
        assert [(s.name, s.oauth and s.oauth.grant) for s in specs] == \
            [("notes", "authorization_code"), ("robot", "client_credentials")]
        operator = Operator()
        clients = McpClients(registry)
        clients.oauth_dir, clients.authorize_prompt = tmp_path / "data" / "mcp-oauth", operator
        clients.start(specs)
        try:
            for name in ("notes", "robot"):
                assert clients.status(name) == "connected", clients.status(name)
                assert registry.execute(f"{name}__add", {"a": 1, "b": 2})["status"] == "ok"
        finally:
            clients.stop()
        assert [s for s, _, _ in operator.seen] == ["notes"]
        assert provider.authorizations == 1 and grantor.grants == 1
        assert sorted(p.name for p in (tmp_path / "data" / "mcp-oauth").iterdir()) == \
            ["notes.json", "robot.json"]


def test_a_stray_callback_without_the_state_is_refused(registry: ToolRegistry,
                                                       tmp_path: Path) -> None:
    port = free_port()
    stray: list[int] = []

    def race(server: str, url: str, callback: str) -> None:
        try:  # another local process answers first, with a code of its own
            urllib.request.urlopen(f"http://127.0.0.1:{port}/callback?code=evil&state=guess",
                                   timeout=5)
        except urllib.error.HTTPError as refused:
            stray.append(refused.code)
        Operator()(server, url, callback)

    with oauth_mcp("http") as (url, provider):
        spec = ServerSpec("guarded", "http", url=url, oauth=code_flow(port))
        clients = McpClients(registry)
        clients.oauth_dir, clients.authorize_prompt = tmp_path, race
        clients.start([spec])
        try:
            assert clients.status("guarded") == "connected", clients.status("guarded")
        finally:
            clients.stop()
    assert stray == [400] and provider.authorizations == 1
