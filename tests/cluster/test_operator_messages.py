"""What an operator sees when the cluster is not as the config says, on real nats-servers:
`wasmext run` against a server that is down exits 1 as `worker` and `nats ls` do (the
command was right; 2 is for a wrong one), a stage whose subject no worker serves names
the way to find out, `nats ls` on a server where nothing answers says so instead of an
empty table, and a worker with nothing loaded does not log an empty subject list."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from cluster_support import ThreadedWorker, free_port, nats_server

from wasmext import Host, HostConfig
from wasmext.runtime import Runtime
from wasmext_cli.main import main

UNSERVED = "wasmext.ext.validate.agent-gaurd.v0"  # a typo: no worker serves it


def session_files(folder: Path, subject: str) -> list[str]:
    """The arguments of a run whose policy's one validator is `subject` on NATS."""
    config = folder / "wasmext.toml"
    config.write_text(f'[host]\ndata_dir = "{folder / "state"}"\n'
                      f'[extensions.guard]\ntype = "validator"\nsubject = "{subject}"\n'
                      'timeout_ms = 2000\nretry = 1\n')
    policy = folder / "policy.toml"
    policy.write_text('policy_id = "p"\n[[validators]]\nid = "guard"\non_fail = "block"\n')
    transcript = folder / "t.json"
    transcript.write_text(json.dumps(
        {"turns": [{"user": "hello", "steps": [{"response": "hi"}]}]}))
    return [str(transcript), "--config", str(config), "--policy", str(policy), "--json"]


@pytest.fixture
def quiet_server() -> Iterator[str]:
    """A nats-server of this test's own, where no service runs."""
    with nats_server() as (url, _):
        yield url


def test_run_against_a_server_that_is_down_exits_1_in_one_line(tmp_path: Path) -> None:
    down = f"nats://127.0.0.1:{free_port()}"  # nothing listens there
    out = CliRunner().invoke(main, ["run", *session_files(tmp_path, UNSERVED),
                                    "--nats", down])
    assert out.exit_code == 1, out.output
    assert "nats unavailable: cannot connect to " + down in out.output
    assert "Traceback" not in out.output


def test_a_stage_no_worker_serves_names_where_to_look(quiet_server: str,
                                                      tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["run", *session_files(tmp_path, UNSERVED),
                                    "--nats", quiet_server])
    assert out.exit_code == 0, out.output
    aborted = json.loads(out.stdout)["turns"][0]["aborted"]
    assert f"no responders on {UNSERVED}: no worker serves it" in aborted
    assert "wasmext nats ls" in aborted


def test_nats_ls_where_nothing_answers_says_so(quiet_server: str) -> None:
    hidden = quiet_server.replace("nats://", "nats://ops:s3cret@")
    out = CliRunner().invoke(main, ["nats", "ls", "--nats", quiet_server, "--wait", "0.2"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0].startswith("SERVICE")
    assert lines[1] == (f"(no service answered on {quiet_server} within 0.2 s: no worker "
                        "is up there, or --wait is too short)")
    # A url's password never shows, here either (the server takes any login).
    out = CliRunner().invoke(main, ["nats", "ls", "--nats", hidden, "--wait", "0.2"])
    assert out.exit_code == 0, out.output
    assert "s3cret" not in out.output and "nats://***@127.0.0.1" in out.output


def test_a_worker_with_nothing_loaded_says_so_in_its_log(
        quiet_server: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    host = Host(HostConfig(data_dir=tmp_path / "data"), runtime=Runtime(cache=False),
                plugin_dirs=[])
    with caplog.at_level(logging.INFO, logger="wasmext.cluster.worker"):
        worker = ThreadedWorker(host, quiet_server, name="empty")
        worker.close()
    said = [r.getMessage() for r in caplog.records if "worker empty serving" in
            r.getMessage()]
    assert said == ["worker empty serving nothing yet (no plugin is loaded)"]


def test_an_open_circuit_says_what_opened_it_and_when_it_tries_again(
        quiet_server: str) -> None:
    """"circuit open" alone leaves the operator guessing: a typo in a subject and a
    crowded worker read the same, and so does a minute's wait and a second's."""
    from wasmext import PipelineError, parse_policy
    from wasmext.cluster.link import NatsLink
    from wasmext.cluster.registry import parse_registry
    from wasmext.cluster.remote import RemoteCaller
    from wasmext.cluster.routing import Router

    registry = parse_registry({"guard": {
        "type": "validator", "subject": UNSERVED, "timeout_ms": 2000,
        "breaker": {"failures": 2, "reset_ms": 60_000}}})
    policy = parse_policy({"validators": [{"id": "guard", "on_fail": "block"}]})
    with NatsLink(quiet_server, name="circuit-test") as link, \
            Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as app:
        router = Router(policy, RemoteCaller(registry, link))
        said = []
        for _ in range(3):
            with app.session() as session, pytest.raises(PipelineError) as caught:
                router.run(session, "hello")
            said.append(caught.value.message)
    assert all(f"no responders on {UNSERVED}" in m for m in said[:2])
    last = said[2].partition("extension guard: ")[2]
    assert last.startswith(f"circuit open (2 failures in a row, the last: no responders on "
                           f"{UNSERVED}: no worker serves it"), last
    assert "; a trial call in 59." in last or "; a trial call in 60.0 s)" in last, last


def test_list_and_mcp_serve_take_nats_as_run_does(quiet_server: str, tmp_path: Path) -> None:
    """An operator who ran `wasmext run --nats URL` lists the same config's [remote]
    plugins with the same option, and sees what the workers serve."""
    from cluster_support import wat_plugin

    (tmp_path / "served").mkdir()
    wat_plugin(tmp_path / "served", "stamp", "pre", {"message": {"payload": "s"}})
    worker_host = Host(HostConfig(data_dir=tmp_path / "worker"), runtime=Runtime(cache=False),
                       plugin_dirs=[("workspace", tmp_path / "served")])
    config = tmp_path / "host.toml"
    config.write_text(f'[host]\ndata_dir = "{tmp_path / "host"}"\n'
                      '[remote.stamp]\nsubject = "wasmext.plugin.stamp.v1"\n'
                      '[remote.ghost]\nsubject = "wasmext.plugin.ghost.v1"\n')
    worker = ThreadedWorker(worker_host, quiet_server, name="lister")
    try:
        out = CliRunner().invoke(main, ["list", "--config", str(config), "--json",
                                        "--nats", quiet_server])
    finally:
        worker.close()
    assert out.exit_code == 0, out.output
    listed = json.loads(out.stdout)
    assert [(p["id"], p["source"]) for p in listed["plugins"]] == [("stamp", "remote")]
    assert listed["order"]["pre"][0]["plugin"] == "stamp"
    assert any("ghost: no worker serves wasmext.plugin.ghost.v1" in e
               for e in listed["errors"]), listed["errors"]
    # Without a server, the line names the option too.
    out = CliRunner().invoke(main, ["list", "--config", str(config)],
                             env={"WASMEXT_NATS_URL": ""})
    assert "(--nats URL, [nats] url or WASMEXT_NATS_URL)" in out.output
    out = CliRunner().invoke(main, ["mcp", "serve", "--help"])
    assert "--nats URL" in out.output


def test_a_policy_stage_whose_remote_plugin_did_not_load_is_named_as_such(
        quiet_server: str, tmp_path: Path) -> None:
    """It said "no [extensions.agent-guard] of the config" of a stage the config has as
    [remote.agent-guard], and named the example policy by its site-packages path."""
    config = tmp_path / "host.toml"
    config.write_text(f'[host]\ndata_dir = "{tmp_path / "host"}"\n'
                      '[remote.agent-guard]\nsubject = "wasmext.plugin.agent-guard.v0"\n')
    out = CliRunner().invoke(main, ["run", "--example", "--config", str(config),
                                    "--nats", quiet_server])
    assert out.exit_code == 0, out.output
    warned = [ln for ln in out.stderr.splitlines() if "warning" in ln]
    assert warned == ["wasmext: warning: the example policy names stage agent-guard, the "
                      "config's [remote.agent-guard] plugin, which did not load (its `not "
                      "loaded:` line says why)"]
    assert "not loaded: plugin agent-guard hook register: remote unavailable: remote " \
           "plugin agent-guard: no worker serves wasmext.plugin.agent-guard.v0" in out.output


def test_a_stage_timing_out_while_the_server_is_down_says_so(tmp_path: Path) -> None:
    """With nats-server stopped, each attempt waits in the client's buffer and times out:
    "timeout after 300 ms" alone sent the operator to the worker, not the server."""
    from wasmext import PipelineError, parse_policy
    from wasmext.cluster.link import NatsLink
    from wasmext.cluster.registry import parse_registry
    from wasmext.cluster.remote import RemoteCaller
    from wasmext.cluster.routing import Router

    with nats_server() as (url, server):
        registry = parse_registry({"guard": {
            "type": "validator", "subject": UNSERVED, "timeout_ms": 300}})
        policy = parse_policy({"validators": [{"id": "guard", "on_fail": "block"}]})
        with NatsLink(url, name="down-test") as link, \
                Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as app:
            router = Router(policy, RemoteCaller(registry, link))
            with app.session() as session, pytest.raises(PipelineError) as up:
                router.run(session, "hello")
            assert "no responders" in up.value.message  # connected: the server answers
            server.terminate()
            server.wait(10)
            with app.session() as session, pytest.raises(PipelineError) as down:
                router.run(session, "hello")
    assert "extension guard: timeout after 300 ms (the NATS connection is down, " \
           "reconnecting)" in down.value.message, down.value.message


def test_a_remote_plugin_unanswered_while_the_server_is_down_says_so(tmp_path: Path) -> None:
    """The same for a whole plugin on a worker: its time-out names the connection."""
    from cluster_support import wat_plugin

    from wasmext.cluster.link import NatsLink
    from wasmext.cluster.plugins import attach_remote
    from wasmext.cluster.registry import RemotePluginEntry

    with nats_server() as (url, server), contextlib.ExitStack() as restarted:
        (tmp_path / "served").mkdir()
        wat_plugin(tmp_path / "served", "stamp", "pre", {"message": {"payload": "s"}})
        worker = ThreadedWorker(Host(HostConfig(data_dir=tmp_path / "w"), runtime=Runtime(
            cache=False), plugin_dirs=[("workspace", tmp_path / "served")]), url, name="w")
        try:
            with NatsLink(url, name="down-plugin-test") as link, \
                    Host(HostConfig(data_dir=tmp_path / "h"), plugin_dirs=[]) as app:
                attach_remote(app, link, {"stamp": RemotePluginEntry(
                    id="stamp", subject="wasmext.plugin.stamp.v1", timeout_ms=400,
                    retry=0)})
                assert not app.load_errors, app.load_errors
                server.terminate()
                server.wait(10)
                with app.session() as session:
                    result, reason = app.try_call("stamp", "pre",
                                                  {"message": {"payload": "x"}}, session)
                # Back on the same port: the link and the worker close on a live server.
                restarted.enter_context(nats_server(int(url.rsplit(":", 1)[1])))
            assert result is None and reason is not None
            assert "no answer from a worker within 400 ms (the NATS connection is down, " \
                "reconnecting)" in reason, reason
            assert reason.count("no answer") == 1, reason  # said once, not twice
        finally:
            worker.close()
