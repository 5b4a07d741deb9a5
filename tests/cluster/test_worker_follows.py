"""A worker serves what a rescan finds: a plugin added, removed or disabled meanwhile.

Under its own prefix `follow`, so the shared workers never answer these subjects."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cluster_support import PYTHONPATH, wat_plugin

from wasmext import Host, HostConfig, PipelineError, parse_policy
from wasmext.cluster.link import NatsLink
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.runtime import Runtime

P = "follow"


def _install(plugins: Path, staging: Path, pid: str) -> None:
    """Build the folder aside, then move it in whole (as `wasmext install` does)."""
    wat_plugin(staging, pid, "pre", {"message": {"payload": f"by {pid}", "metadata": {}}})
    (staging / pid).rename(plugins / pid)


def _ask(link: NatsLink, pid: str) -> str:
    """The payload `pid`'s pre stage answers, or why it did not."""
    registry = parse_registry({pid: {"type": "pre", "subject": f"{P}.ext.pre.{pid}.v1",
                                     "timeout_ms": 2000}})
    router = Router(parse_policy({"pre": [{"id": pid, "mode": "required"}]}),
                    RemoteCaller(registry, link))
    with Host(HostConfig(state_backend="memory"), runtime=Runtime(cache=False),
              plugin_dirs=[]) as app, app.session() as s:
        try:
            return str(router.run(s, "m", trace_id="t").message["payload"])
        except PipelineError as err:
            return f"failed: {err}"


def _eventually(check: Any, want: object, timeout: float = 30) -> object:
    """What `check()` gives once it gives `want`, or at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_a_worker_serves_what_a_rescan_finds(spawn: Any, nats_url: str,
                                             tmp_path: Path) -> None:
    plugins, staging, nobody = tmp_path / "plugins", tmp_path / "staging", tmp_path / "user"
    for folder in (plugins, staging, nobody):
        folder.mkdir()
    _install(plugins, staging, "first")
    config = tmp_path / "wasmext.toml"  # what `wasmext disable` reads too
    config.write_text(f'[host]\ndata_dir = "{tmp_path / "data"}"\n'
                      f'[plugins]\nworkspace_dir = "{plugins}"\nuser_dir = "{nobody}"\n')
    spawn("follower", "worker", "--nats", nats_url, "--config", str(config),
          "--name", "follower", "--prefix", P).wait_ready()
    with NatsLink(nats_url) as link:
        assert _ask(link, "first") == "by first"
        assert "no responders" in _ask(link, "second")

        _install(plugins, staging, "second")  # added while it runs
        assert _eventually(lambda: _ask(link, "second"), "by second") == "by second"
        assert _ask(link, "first") == "by first"  # the others kept serving

        shutil.rmtree(plugins / "first")  # removed
        assert _eventually(lambda: "no responders" in _ask(link, "first"), True) is True
        assert _ask(link, "second") == "by second"

        disabled = subprocess.run([sys.executable, "-m", "wasmext_cli", "disable", "second",
                                   "--config", str(config)], cwd=tmp_path,
                                  env={**os.environ, "PYTHONPATH": PYTHONPATH},
                                  capture_output=True, text=True, timeout=60)
        assert disabled.returncode == 0, disabled.stderr
        assert _eventually(lambda: "no responders" in _ask(link, "second"), True) is True


def test_without_watch_the_worker_keeps_what_it_started_with(spawn: Any, nats_url: str,
                                                             tmp_path: Path) -> None:
    plugins, staging = tmp_path / "plugins", tmp_path / "staging"
    plugins.mkdir()
    staging.mkdir()
    spawn("fixed", "worker", "--nats", nats_url, "--plugins", str(plugins), "--name", "fixed",
          "--prefix", P, "--no-watch").wait_ready()
    _install(plugins, staging, "late")
    time.sleep(3)  # three times the follow interval: a watching worker would serve it
    with NatsLink(nats_url) as link:
        assert "no responders" in _ask(link, "late")

