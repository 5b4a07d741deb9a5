"""A policy whose stages run on `wasmext worker` processes and a foreign nats-py
service, over a real nats-server: same results as in-process, failures as the
pipeline's rules say, retry, breaker, tenants, the contract enforced on the wire."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cluster_support import POLICY, registry
from prometheus_client import generate_latest

from wasmext import Host, HostConfig, PipelineError, parse_policy
from wasmext.cluster.link import NatsLink
from wasmext.cluster.metrics import RemoteMetrics
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router, parse_routing
from wasmext.cluster.worker import session_id
from wasmext.runtime import Runtime
from wasmext_cli.main import main


@pytest.fixture
def link(nats_url: str) -> Iterator[NatsLink]:
    with NatsLink(nats_url, name="test-caller") as ln:
        yield ln


@pytest.fixture
def app() -> Iterator[Host]:
    """The calling host: no plugins of its own."""
    with Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as host:
        yield host


@pytest.fixture
def two_workers(shared_workers: list[Any]) -> list[Any]:
    return shared_workers


def run(host: Host, router: Router, payload: str, **kw: Any) -> Any:
    with host.session() as s:
        return router.run(s, payload, {"lang": "en"}, **kw)


def test_remote_stages_give_the_in_process_results(two_workers: list[Any], link: NatsLink,
                                                   app: Host, plugin_dir: Path) -> None:
    policy = parse_policy(POLICY)
    guard = parse_policy({"validators": [{"id": "agent-guard"}]})
    remote = Router(policy, RemoteCaller(registry(), link))
    with Host(HostConfig(), runtime=Runtime(cache=False),
              plugin_dirs=[("workspace", plugin_dir)]) as local_host:
        local = run(local_host, Router(policy), "hello")
        with local_host.session() as s, pytest.raises(PipelineError) as local_block:
            Router(guard).run(s, "my password")
    got = run(app, remote, "hello")
    assert (got.message["payload"], got.message["metadata"]) == \
        (local.message["payload"], local.message["metadata"]) == ("posted", {"post": True})
    assert got.context == local.context == {"posted": True}
    assert got.provider == local.provider == "answer"
    with app.session() as s, pytest.raises(PipelineError) as remote_block:
        Router(guard, remote.caller).run(s, "my password")
    assert remote_block.value.message == local_block.value.message
    assert "agent-guard: banned word: password" in remote_block.value.message
    answered = remote.caller.stats if remote.caller else {}
    assert answered["stamp"].ok == 1 and answered["agent-guard"].ok == 2


def test_messagepack_is_negotiated_per_extension(two_workers: list[Any], link: NatsLink,
                                                 app: Host) -> None:
    packed = registry(stamp={"encoding": "msgpack"}, agent_guard={"encoding": "msgpack"},
                      answer={"encoding": "msgpack"}, tail={"encoding": "msgpack"})
    got = run(app, Router(parse_policy(POLICY), RemoteCaller(packed, link)), "hello")
    assert got.message["payload"] == "posted" and got.provider == "answer"


def test_a_foreign_extension_in_the_same_policy(two_workers: list[Any], foreign: Any,
                                                link: NatsLink, app: Host) -> None:
    policy = parse_policy({"policy_id": "mixed",
                           "pre": [{"id": "shout", "config": {"lowercase": False}}],
                           "validators": [{"id": "agent-guard"}], "providers": ["crm"]})
    got = run(app, Router(policy, RemoteCaller(registry(), link)), "hi there",
              tenant_id="t-1", trace_id="trace-42")
    assert got.provider == "crm"
    assert got.message["payload"] == "summary of HI THERE"
    assert got.message["metadata"]["source"] == "crm"
    assert got.message["metadata"]["usage"] == {"prompt_tokens": 8, "completion_tokens": 2}
    with app.session() as s, pytest.raises(PipelineError, match="banned word: password"):
        Router(policy, RemoteCaller(registry(), link)).run(s, "PassWord")


def test_trace_tenant_and_config_reach_the_extension(foreign: Any, link: NatsLink,
                                                     app: Host) -> None:
    policy = parse_policy({"pre": [{"id": "shout", "config": {"k": 1}}]})
    got = run(app, Router(policy, RemoteCaller(registry(), link)), "x", tenant_id="acme",
              trace_id="tr-1")
    meta = got.message["metadata"]
    assert (meta["config"], meta["tenant"], meta["trace_header"]) == ({"k": 1}, "acme", "tr-1")
    assert got.message["message_id"] == "tr-1" and got.context["shouted"] is True
    generated = run(app, Router(policy, RemoteCaller(registry(), link)), "x")
    assert len(generated.message["metadata"]["trace_header"]) == 32  # a fresh trace id


@pytest.mark.parametrize(("on_fail", "blocked"), [("block", True), ("warn", False),
                                                  ("ignore", False)])
def test_a_validator_that_times_out_counts_as_reject(foreign: Any, link: NatsLink, app: Host,
                                                     on_fail: str, blocked: bool) -> None:
    policy = parse_policy({"validators": [{"id": "sleepy", "on_fail": on_fail}]})
    router = Router(policy, RemoteCaller(registry(), link))
    started = time.monotonic()
    if blocked:
        with app.session() as s, pytest.raises(PipelineError, match="timeout after 150 ms"):
            router.run(s, "x")
    else:
        got = run(app, router, "x")
        assert got.warnings == (["sleepy: extension sleepy: timeout after 150 ms"]
                                if on_fail == "warn" else [])
    assert time.monotonic() - started < 1.5  # the 2 s answer was not waited for
    assert router.caller is not None and router.caller.stats["sleepy"].timeouts == 1


def test_retry_then_success(foreign: Any, link: NatsLink, app: Host) -> None:
    policy = parse_policy({"validators": [{"id": "flaky"}]})
    router = Router(policy, RemoteCaller(registry(), link))
    assert run(app, router, "x", trace_id="first").blocked is False
    stats = router.caller.stats["flaky"] if router.caller else None
    assert stats is not None and (stats.retries, stats.timeouts, stats.ok) == (1, 1, 1)
    no_retry = Router(policy, RemoteCaller(registry(flaky={"retry": 0}), link))
    with app.session() as s, pytest.raises(PipelineError, match="timeout"):
        no_retry.run(s, "x", trace_id="second")


def test_the_circuit_opens_then_tries_again(link: NatsLink, app: Host) -> None:
    reg = registry(stamp={"subject": "wasmext.ext.pre.nobody.v1",
                          "breaker": {"failures": 2, "reset_ms": 300}})
    caller = RemoteCaller(reg, link)
    router = Router(parse_policy({"pre": [{"id": "stamp", "mode": "optional"}]}), caller)
    for _ in range(2):
        assert run(app, router, "x").skipped == ["stamp"]
    assert caller.breakers["stamp"].state == "open"
    started = time.monotonic()
    assert run(app, router, "x").skipped == ["stamp"]
    assert time.monotonic() - started < 0.5 and caller.stats["stamp"].short_circuited == 1
    time.sleep(0.35)
    assert caller.breakers["stamp"].state == "half_open"
    run(app, router, "x")  # the trial fails: open again
    assert caller.breakers["stamp"].state == "open"
    RemoteMetrics(caller).register(app.observe.metrics.registry)
    text = generate_latest(app.observe.metrics.registry).decode()
    assert 'extension_remote_breaker_state{extension="stamp"} 2.0' in text
    assert 'extension_remote_calls_total{extension="stamp",outcome="short_circuited"} 1.0' in text
    assert 'extension_remote_calls_total{extension="stamp",outcome="failed"} 3.0' in text


def test_latency_and_timeouts_are_metrics(foreign: Any, link: NatsLink, app: Host) -> None:
    caller = RemoteCaller(registry(), link)
    RemoteMetrics(caller).register(app.observe.metrics.registry)
    run(app, Router(parse_policy({"pre": [{"id": "shout"}]}), caller), "x")
    run(app, Router(parse_policy({"validators": [{"id": "flaky"}]}), caller), "x")
    text = generate_latest(app.observe.metrics.registry).decode()
    assert 'extension_remote_latency_ms{extension="shout",quantile="0.99"}' in text
    assert 'extension_remote_timeouts_total{extension="flaky"} 1.0' in text
    assert 'extension_remote_retries_total{extension="flaky"} 1.0' in text
    assert 'extension_remote_breaker_state{extension="flaky"} 0.0' in text


def test_tenant_overrides_and_feature_flags(foreign: Any, link: NatsLink, app: Host) -> None:
    routing = parse_routing({
        "pre": [{"id": "shout", "config": {"level": 1}}],
        "validators": [{"id": "sleepy"}],
        "tenants": {"acme": {"disable": ["sleepy"], "config": {"shout": {"level": 2}}},
                    "beta": {"policy": {"policy_id": "beta", "providers": ["crm"]}}}})
    router = Router(routing, RemoteCaller(registry(), link))
    with app.session() as s, pytest.raises(PipelineError, match="timeout"):
        router.run(s, "x", tenant_id="default")  # sleepy blocks the default tenant
    acme = run(app, router, "x", tenant_id="acme")
    assert acme.message["metadata"]["config"] == {"level": 2}
    assert acme.message["metadata"]["tenant"] == "acme"
    beta = run(app, router, "x", tenant_id="beta")
    assert beta.provider == "crm" and beta.message["payload"] == "summary of x"


def test_a_hostile_answer_is_a_named_failure_and_the_caller_carries_on(
        foreign: Any, link: NatsLink, app: Host) -> None:
    router = Router(parse_policy({"validators": [{"id": "garbage"}]}),
                    RemoteCaller(registry(), link))
    started = time.monotonic()
    with app.session() as s, pytest.raises(PipelineError, match="nested too deep"):
        router.run(s, "x")
    assert time.monotonic() - started < 5
    healthy = Router(parse_policy({"pre": [{"id": "shout"}]}), RemoteCaller(registry(), link))
    assert run(app, healthy, "ok").message["payload"] == "OK"


def test_a_worker_refuses_a_request_with_an_unknown_key(two_workers: list[Any],
                                                        link: NatsLink) -> None:
    request = {"trace_id": "t", "tenant_id": "x", "extensions": {"id": "stamp"},
               "message": {"message_id": "m", "message_type": "chat", "payload": "p",
                           "metadata": {}, "priority": 9}, "context": {}}
    msg = link.request("wasmext.ext.pre.stamp.v1", json.dumps(request).encode(), {}, 5)
    assert msg.headers is not None and msg.headers["Nats-Service-Error-Code"] == "400"
    assert "unknown field `priority`" in msg.headers["Nats-Service-Error"]
    del request["message"]["priority"]  # type: ignore[attr-defined]
    ok = link.request("wasmext.ext.pre.stamp.v1", json.dumps(request).encode(), {}, 5)
    assert json.loads(ok.data)["message"]["payload"] == "stamped"


def test_nats_ls_lists_services_instances_and_stats(two_workers: list[Any], link: NatsLink,
                                                    app: Host, nats_url: str) -> None:
    run(app, Router(parse_policy(POLICY), RemoteCaller(registry(), link)), "hello")
    with app.session() as s, pytest.raises(PipelineError, match="out of fuel"):
        Router(parse_policy({"pre": [{"id": "burn"}]}), RemoteCaller(registry(), link)).run(
            s, "x")
    out = CliRunner().invoke(main, ["nats", "ls", "--nats", nats_url, "--json"])
    assert out.exit_code == 0, out.output
    services = {s["name"]: s for s in json.loads(out.output)}
    assert services["wasmext-stamp"]["instances"] == 2
    # Real workers' INFO and STATS agree, each answering once (ops.list_services).
    assert services["wasmext-stamp"]["disagreeing"] == {}
    assert services["wasmext-stamp"]["duplicate_answers"] == 0
    assert services["wasmext-stamp"]["version"] == "1.2.0"
    # Its stage, and the whole plugin (cluster.plugins) beside it.
    assert services["wasmext-stamp"]["subjects"] == [
        "wasmext.ext.pre.stamp.v1", "wasmext.plugin.stamp.v1.describe",
        "wasmext.plugin.stamp.v1.call"]
    assert services["wasmext-stamp"]["requests"] >= 1
    assert services["wasmext-burn"]["errors"] >= 1  # the out-of-fuel call above
    assert services["wasmext-agent-guard"]["subjects"][0] == \
        "wasmext.ext.validate.agent-guard.v0"
    table = CliRunner().invoke(main, ["nats", "ls", "--nats", nats_url])
    assert "wasmext-answer" in table.output and "wasmext.provider.answer.v1" in table.output


def test_the_sandbox_limits_hold_on_the_worker(two_workers: list[Any], link: NatsLink,
                                               app: Host) -> None:
    burn = Router(parse_policy({"pre": [{"id": "burn"}]}), RemoteCaller(registry(), link))
    with app.session() as s, pytest.raises(PipelineError, match="out of fuel"):
        burn.run(s, "x")
    healthy = Router(parse_policy({"pre": [{"id": "stamp"}]}), RemoteCaller(registry(), link))
    assert run(app, healthy, "x").message["payload"] == "stamped"


def test_a_hostile_trace_id_does_not_reach_state_or_logs(two_workers: list[Any],
                                                         link: NatsLink, app: Host) -> None:
    hostile = "\x1b[31m\n" + "t" * 100_000
    started = time.monotonic()
    got = run(app, Router(parse_policy({"pre": [{"id": "stamp"}]}),
                          RemoteCaller(registry(), link)), "x", trace_id=hostile)
    assert got.message["payload"] == "stamped"
    assert time.monotonic() - started < 5
    assert session_id(hostile).startswith("trace-") and len(session_id(hostile)) == 38
    assert session_id("abc-1") == "abc-1"


def test_nats_ls_cleans_what_services_answer(link: NatsLink, nats_url: str) -> None:
    async def liar(msg: Any) -> None:
        await msg.respond(json.dumps({"id": "x\n\x1b[2J", "name": "evil\nname\x1b[31m" * 30,
                                      "version": 7, "endpoints": [{"subject": 5}, "junk"]
                                      }).encode())
    sub = link.run(link.client.subscribe("$SRV.INFO", cb=liar), 5)
    link.run(link.client.flush(), 5)
    try:
        out = CliRunner().invoke(main, ["nats", "ls", "--nats", nats_url])
    finally:
        link.run(sub.unsubscribe(), 5)
    assert out.exit_code == 0, out.output
    evil = [line for line in out.output.splitlines() if "evil" in line]
    # One inert row, and one inert note: it answered INFO and no STATS (ops.list_services).
    assert "\x1b" not in out.output and len(evil) == 2
    assert evil[1].startswith("! ") and evil[1].endswith(": no STATS answer")
    assert all(len(line) < 400 for line in evil)


def test_no_server_is_one_line_and_a_quick_exit(plugin_dir: Path) -> None:
    from cluster_support import PYTHONPATH, free_port

    url = f"nats://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    out = CliRunner().invoke(main, ["nats", "ls", "--nats", url])
    assert out.exit_code == 1 and "nats unavailable: cannot connect" in out.output
    done = subprocess.run([sys.executable, "-m", "wasmext_cli", "worker", "--nats", url,
                           "--plugins", str(plugin_dir)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert done.returncode == 1, done.stderr
    assert "nats unavailable: cannot connect" in done.stderr.splitlines()[-1]
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 30
