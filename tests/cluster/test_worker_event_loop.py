"""A worker and a synchronous link on the event loop chosen for them (wasmext.loops),
over a real nats-server: asyncio's own by default, uvloop on request, the same answers
on both; a bad choice stops the worker before it loads anything."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cluster_support import POLICY, registry

from wasmext import Host, HostConfig, parse_policy
from wasmext.cluster.link import NatsLink
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.loops import EVENT_LOOP_ENV, loop_name
from wasmext.runtime import Runtime
from wasmext_cli.main import main


@pytest.mark.parametrize("choice", [None, "uvloop"])
def test_a_worker_serves_a_pipeline_on_the_loop_it_was_given(
        spawn: Any, nats_url: str, plugin_dir: Path, choice: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    expected = choice or "asyncio"
    prefix = f"loop{expected}"
    chosen = ("--loop", choice) if choice else ()
    proc = spawn(f"w-{expected}", "worker", "--nats", nats_url, "--plugins", str(plugin_dir),
                 "--name", f"w-{expected}", "--prefix", prefix, *chosen).wait_ready()
    assert f"event loop: {expected}" in proc.log_path.read_text().splitlines()
    with NatsLink(nats_url, name="loop-test") as link, \
            Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as app:
        router = Router(parse_policy(POLICY), RemoteCaller(registry(prefix), link))
        for turn in range(3):
            with app.session() as session:
                got = router.run(session, f"hello {turn}", {"lang": "en"})
            assert (got.message["payload"], got.context) == ("posted", {"posted": True})
        assert router.caller is not None and router.caller.stats["stamp"].ok == 3


@pytest.mark.parametrize(("env", "expected"), [(None, "asyncio"), ("uvloop", "uvloop")])
def test_a_synchronous_link_runs_its_thread_on_the_chosen_loop(
        nats_url: str, env: str | None, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if env is None:
        monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    else:
        monkeypatch.setenv(EVENT_LOOP_ENV, env)
    with NatsLink(nats_url, name="loop-link") as link:
        assert loop_name(link._loop) == expected
        # nothing serves this subject: the server says so at once, on either loop
        with pytest.raises(Exception, match="no responders"):
            link.request("loop.test.nobody", b"{}", {}, 2.0)


def test_a_bad_loop_choice_stops_the_worker_before_it_loads(tmp_path: Path) -> None:
    env = {**os.environ, EVENT_LOOP_ENV: "trio\x1b[2J"}
    result = CliRunner().invoke(main, ["worker", "--nats", "nats://127.0.0.1:1",
                                       "--plugins", str(tmp_path)], env=env)
    assert result.exit_code == 2, result.output
    assert "event loop 'trio" in result.output and "is not one of asyncio, uvloop" \
        in result.output and "\x1b" not in result.output
