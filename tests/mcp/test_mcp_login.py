"""`wasmext mcp login` / `logout`: authorizing ahead of time against the real
OAuth-protected servers of oauth_support, then connecting without anyone there."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from oauth_support import client_credentials_mcp, oauth_mcp, robot_config
from test_mcp_oauth import Operator, code_flow, connect

from support import ROOT
from wasmext import McpAuthError
from wasmext.mcp.client.spec import ServerSpec
from wasmext.mcp.oauth.login import login, logout
from wasmext.testing import make_host


def cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wasmext_cli", "mcp", *args], cwd=cwd, capture_output=True,
        text=True, timeout=120, stdin=subprocess.DEVNULL,
        env={**os.environ, **env, "PYTHONPATH": f"{ROOT / 'host'}:{ROOT / 'cli'}"})


def test_login_ahead_then_connect_without_anyone(tmp_path: Path) -> None:
    folder = tmp_path / "mcp-oauth"
    with oauth_mcp("http") as (url, provider):
        spec = ServerSpec("guarded", "http", url=url, oauth=code_flow())
        operator = Operator()
        stored = login(spec, folder, operator)
        assert stored == folder / "guarded.json" and provider.authorizations == 1
        assert stat.S_IMODE(stored.stat().st_mode) == 0o600
        host = make_host()
        try:
            nobody = Operator(visit=False)  # a service starting: nobody at the terminal
            clients = connect(host.tools, folder, spec, nobody)
            try:
                assert clients.status("guarded") == "connected", clients.status("guarded")
                assert nobody.seen == [] and provider.authorizations == 1
            finally:
                clients.stop()
        finally:
            host.close()
        assert logout(folder, "guarded") is True and not stored.exists()
        assert logout(folder, "guarded") is False


def test_login_when_nobody_authorizes_is_a_named_error_in_time(tmp_path: Path) -> None:
    with oauth_mcp("http") as (url, _provider):
        spec = ServerSpec("guarded", "http", url=url,
                          oauth=code_flow(authorize_timeout_s=1.0))
        with pytest.raises(McpAuthError, match="nobody authorized wasmext within 1 s"):
            login(spec, tmp_path / "mcp-oauth", Operator(visit=False))
        stored = tmp_path / "mcp-oauth" / "guarded.json"  # the client registration only
        assert not stored.exists() or "access_token" not in stored.read_text()


def test_the_login_and_logout_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wasmext.config import load_config

    env = {"ROBOT_ID": "robot-7", "ROBOT_SECRET": "s3cret-value-0123"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with client_credentials_mcp("robot-7", "s3cret-value-0123") as (url, issuer, grantor):
        config = robot_config(tmp_path, url, issuer, '[mcp.servers.plain]\ntransport = "http"\n'
                              f'url = "{url}"\n')
        done = cli("login", "robot", "--config", str(config), cwd=tmp_path, **env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("mcp server robot: authorized; tokens stored in ")
        assert "s3cret" not in done.stdout + done.stderr and grantor.grants == 1
        token_file = tmp_path / "data" / "mcp-oauth" / "robot.json"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        with make_host(config=load_config(config)) as host:  # the stored token, no new grant
            clients = host.start_mcp()
            assert clients is not None and clients.status("robot") == "connected"
        assert grantor.grants == 1

        gone = cli("logout", "robot", "--config", str(config), cwd=tmp_path, **env)
        assert gone.returncode == 0 and gone.stdout.strip() == "mcp server robot: tokens removed"
        assert not token_file.exists()
        again = cli("logout", "robot", "--config", str(config), cwd=tmp_path, **env)
        assert again.stdout.strip() == "mcp server robot: no tokens were stored"

        for args, said in [(("login", "nowhere"), "no mcp server 'nowhere'"),
                           (("login", "plain"), "has no [mcp.servers.plain.oauth] table")]:
            bad = cli(*args, "--config", str(config), cwd=tmp_path, **env)
            assert bad.returncode != 0 and said in bad.stderr, bad.stderr
            assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr

        wrong = cli("login", "robot", "--config", str(config), cwd=tmp_path,
                    ROBOT_ID="robot-7", ROBOT_SECRET="not-the-secret")
        assert wrong.returncode != 0 and "mcp server robot" in wrong.stderr, wrong.stderr
        assert "not-the-secret" not in wrong.stderr and "Traceback" not in wrong.stderr
        assert "\x1b" not in wrong.stderr
        assert not token_file.exists() or "access_token" not in token_file.read_text()


def test_login_is_a_command_of_the_installed_cli() -> None:
    help_text = subprocess.run([sys.executable, "-m", "wasmext_cli", "mcp", "--help"],
                               capture_output=True, text=True, timeout=60,
                               env={**os.environ,
                                    "PYTHONPATH": f"{ROOT / 'host'}:{ROOT / 'cli'}"}).stdout
    assert "login" in help_text and "logout" in help_text
