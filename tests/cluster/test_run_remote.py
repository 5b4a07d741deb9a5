"""`wasmext run --policy` with stages the config's [extensions] tables put on NATS
(a real nats-server and `wasmext worker`s), and the policy and registry read again
when their files change."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wasmext import Host, HostConfig, PipelineError, load_config
from wasmext.cluster.link import NatsLink
from wasmext.cluster.live import LiveRouting
from wasmext.runtime import Runtime

GUARD = "wasmext.ext.validate.agent-guard.v0"


def write_config(folder: Path, subject: str = GUARD, ext_type: str = "validator") -> Path:
    config = folder / "wasmext.toml"
    config.write_text(f'[host]\ndata_dir = "{folder / "state"}"\n'
                      f'[extensions.remote-guard]\ntype = "{ext_type}"\n'
                      f'subject = "{subject}"\ntimeout_ms = 3000\n')
    return config


def write_policy(folder: Path, body: str) -> Path:
    policy = folder / "policy.toml"
    policy.write_text(body)
    return policy


GUARDED = 'policy_id = "guarded"\n[[validators]]\nid = "remote-guard"\non_fail = "block"\n'


def run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    transcript = folder / "transcript.json"
    transcript.write_text(json.dumps({"model": "replay", "turns": [
        {"user": "hello there", "steps": [{"response": "hi"}]},
        {"user": "what is my password", "steps": [{"response": "no"}]}]}))
    return subprocess.run([sys.executable, "-m", "wasmext_cli", "run", str(transcript),
                           *args, "--json"], capture_output=True, text=True, timeout=120,
                          cwd=folder, env=dict(os.environ))


def test_run_uses_the_configs_remote_stages(shared_workers: list[Any], nats_url: str,
                                            tmp_path: Path) -> None:
    config, policy = write_config(tmp_path), write_policy(tmp_path, GUARDED)
    proc = run(tmp_path, "--config", str(config), "--policy", str(policy), "--nats", nats_url)
    assert proc.returncode == 0, proc.stderr
    turns = json.loads(proc.stdout)["turns"]
    assert turns[0]["aborted"] is None and turns[0]["response"] == "hi"
    # The worker's agent-guard (a real plugin) refused the second message.
    assert "remote-guard: banned word: password" in turns[1]["aborted"]
    # Without a NATS server to reach them, the command says what is missing.
    proc = run(tmp_path, "--config", str(config), "--policy", str(policy))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "remote-guard" in proc.stderr and "--nats URL" in proc.stderr


@pytest.fixture
def app() -> Iterator[Host]:
    with Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as host:
        yield host


def guarded(app: Host, live: LiveRouting, text: str) -> str:
    with app.session() as s:
        try:
            live.current().run(s, text, provider=lambda d: d["message"])
        except PipelineError as err:
            return err.message
    return "passed"


def touch_later(path: Path, text: str) -> None:
    """Write `text` and move the mtime on, so that even a coarse clock sees a change."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_the_policy_and_the_registry_reload_when_their_files_change(
        shared_workers: list[Any], foreign: Any, nats_url: str, app: Host,
        tmp_path: Path) -> None:
    config = write_config(tmp_path)
    policy = write_policy(tmp_path, 'policy_id = "open"\n')
    with NatsLink(nats_url, name="live-test") as link:
        live = LiveRouting(policy, config, lambda p: load_config(p).extensions, link)
        assert guarded(app, live, "my password") == "passed"
        touch_later(policy, GUARDED)  # the policy now names the remote validator
        assert "banned word: password" in guarded(app, live, "my password")
        assert guarded(app, live, "hello") == "passed" and live.reloads == 1
        # The registry moves remote-guard to the foreign service that waits 2 s: with
        # a 300 ms deadline it now times out, which a validator counts as reject.
        touch_later(config, config.read_text().replace(GUARD, "wasmext.ext.validate.sleepy.v1")
                    .replace("timeout_ms = 3000", "timeout_ms = 300"))
        assert "timeout after 300 ms" in guarded(app, live, "hello")
        # A broken edit is logged and the last good routing stays in use.
        touch_later(policy, "policy_id = [\n")
        assert "timeout after 300 ms" in guarded(app, live, "hello")
        touch_later(config, config.read_text().replace("wasmext.ext.validate.sleepy.v1", GUARD)
                    .replace("timeout_ms = 300", "timeout_ms = 3000"))
        touch_later(policy, GUARDED)
        assert guarded(app, live, "hello") == "passed"
        assert "banned word" in guarded(app, live, "password")
