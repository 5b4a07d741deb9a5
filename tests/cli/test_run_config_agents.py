"""[agents.NAME] in wasmext.toml: agents that plugins reach under `wasmext run` (and every
Host built from the config), a target that cannot be used as a config error naming the
agent, the grants and the agent budget as for agents the Python API registers."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from click.testing import CliRunner

from wasmext import Host, PluginError, load_config
from wasmext.errors import ConfigError
from wasmext.testing import DATA_AT, HOST_CALL_IMPORT, guest_wat
from wasmext_cli.main import main

ROOT = Path(__file__).resolve().parents[2]
AGENTS_MODULE = '''
import threading
import time

released = threading.Event()
calls = []


def review(data):
    calls.append(data)
    return {"response": f"reviewed {data}", "finish_reason": "text_response"}


def slow(data):
    calls.append(data)
    released.wait(30)  # the test releases it; a cancel cannot stop Python code
    return {"response": "too late", "finish_reason": "text_response"}


class Helper:
    made = 0

    def __init__(self):
        Helper.made += 1
        self.n = Helper.made

    def ask(self, data):
        return {"response": f"helper {self.n} got {data}", "finish_reason": "text_response"}


NOT_CALLABLE = 42
'''


def turn_wasm(request: dict[str, Any]) -> bytes:
    """A turn hook whose answer is its one host call's answer (no `next`: for Plugin.call)."""
    raw = msgpack.packb(request)
    return bytes(wasmtime.wat2wasm(guest_wat(
        f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
        imports=HOST_CALL_IMPORT, data=raw,
        registration={"hooks": [{"hook": "turn"}], "abi_minor": 1})))


def asking_plugin(plugins: Path, pid: str, agent: str, timeout_ms: int | None = None) -> str:
    """A turn middleware that asks `agent` (input "ping"), calls next, and answers the
    turn with what the agent answered (its host call's answer is its own answer); its
    module's digest."""
    ask: dict[str, Any] = {"op": "agents.request", "agent": agent, "input": "ping"}
    if timeout_ms is not None:
        ask["timeout_ms"] = timeout_ms
    first, then = msgpack.packb(ask), msgpack.packb({"op": "next"})
    body = (f"(local $answer i64) "
            f"(local.set $answer (call $host_call (i32.const {DATA_AT}) "
            f"(i32.const {len(first)}))) "
            f"(drop (call $host_call (i32.const {DATA_AT + len(first)}) "
            f"(i32.const {len(then)}))) (local.get $answer)")
    wasm = wasmtime.wat2wasm(guest_wat(body, imports=HOST_CALL_IMPORT, data=first + then,
                                       registration={"hooks": [{"hook": "turn"}],
                                                     "abi_minor": 1}))
    folder = plugins / pid
    folder.mkdir(parents=True)
    (folder / f"{pid}.wasm").write_bytes(wasm)
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "1.0.0"\n')
    return hashlib.sha256(bytes(wasm)).hexdigest()


def project(tmp_path: Path, agents: str, plugins: dict[str, tuple[str, list[str]]],
            module: str = "wx_cfg_agents") -> Path:
    """A folder with the agents' module, a transcript, the plugins (id: (agent it asks,
    its capabilities)) and a wasmext.toml declaring `agents`."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / f"{module}.py").write_text(AGENTS_MODULE)
    (tmp_path / "t.json").write_text(json.dumps(
        {"model": "m", "turns": [{"user": "hi", "steps": [{"response": "from the model"}]}]}))
    grants = ""
    for pid, (agent, caps) in plugins.items():
        digest = asking_plugin(tmp_path / "plugins", pid, agent)
        grants += (f'[grants.{pid}]\ndigest = "sha256:{digest}"\n'
                   f"capabilities = {json.dumps(caps)}\n")
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n'
                      + grants + agents.replace("MODULE", module))
    return config


def run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(folder / "code"), str(ROOT / "host"), str(ROOT / "cli"),
         os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "wasmext_cli", "run", *args],
                          capture_output=True, text=True, timeout=120, cwd=folder, env=env)


@pytest.fixture
def code_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The tmp project's code folder on sys.path, its module forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    monkeypatch.chdir(tmp_path)
    yield tmp_path / "code"
    for name in [n for n in sys.modules if n.startswith("wx_cfg_agents")]:
        del sys.modules[name]


def test_wasmext_run_reaches_a_config_declared_agent(tmp_path: Path) -> None:
    config = project(tmp_path, '[agents.reviewer]\ntarget = "MODULE:review"\n'
                               '[agents.helper]\ntarget = "MODULE:Helper"\nfactory = true\n'
                               '[plugin.asker]\npriority = 60\n',  # the outer layer
                     {"asker": ("reviewer", ["agents", "agents:reviewer"]),
                      "helped": ("helper", ["agents", "agents:help*"])})
    proc = run(tmp_path, "t.json", "--config", str(config), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["load_errors"] == [] and doc["plugins"] == ["asker", "helped"]
    # The outer layer answered the turn with its agent's answer: it reached the plugin.
    assert doc["turns"][0]["response"] == "reviewed ping"
    assert doc["turns"][0]["steps"][0]["response"] == "from the model"  # next ran
    # The inner one answered with the helper session's, which the outer one replaced.
    outcomes = {e["plugin"]: e["outcome"] for e in doc["trace"] if e["plugin"]}
    assert outcomes == {"asker": "changed", "helped": "changed"}, doc["trace"]


def test_a_target_that_cannot_be_used_is_a_config_error_naming_each_agent(
        tmp_path: Path) -> None:
    config = project(tmp_path, '[agents.ghost]\ntarget = "wx_no_such_module:review"\n'
                               '[agents.typo]\ntarget = "MODULE:reveiw"\n'
                               '[agents.number]\ntarget = "MODULE:NOT_CALLABLE"\n'
                               '[agents.fine]\ntarget = "MODULE:review"\n', {})
    proc = run(tmp_path, "t.json", "--config", str(config))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    line, = proc.stderr.splitlines()
    assert line.startswith(f"wasmext: config: {config}: ")  # as any bad field is
    assert "field 'agents.ghost.target': agent ghost: cannot import module " \
           "'wx_no_such_module': ModuleNotFoundError" in line
    # Where it is looked for, and how to put it there (the config's folder is not added).
    assert "No module named 'wx_no_such_module' (targets are imported from the Python " \
           "path: add its folder to PYTHONPATH)" in line
    assert "field 'agents.typo.target': agent typo: wx_cfg_agents has no attribute " \
           "'reveiw'" in line
    assert "field 'agents.number.target': agent number: wx_cfg_agents:NOT_CALLABLE is not " \
           "callable (a int)" in line
    assert "agents.fine" not in line
    # The file's own rules are checked with the others' (pydantic): a bad name, both kinds.
    config.write_text('[agents."bad*name"]\ntarget = "MODULE:review"\n'
                      '[agents.both]\ntarget = "m:f"\nsystem = "s"\n'
                      '[agents.form]\ntarget = "not a path"\n')
    proc = run(tmp_path, "t.json", "--config", str(config))
    assert proc.returncode == 2
    assert "field 'agents.bad*name': not an agent name" in proc.stderr
    assert "field 'agents.both': give either target" in proc.stderr
    assert "field 'agents.form.target': must be 'package.module:attribute'" in proc.stderr


def test_a_plugin_without_the_agents_grant_for_that_name_is_denied(
        tmp_path: Path) -> None:
    config = project(tmp_path, '[agents.reviewer]\ntarget = "MODULE:review"\n'
                               '[agents.other]\ntarget = "MODULE:review"\n',
                     {"stranger": ("reviewer", ["agents", "agents:other"])})
    proc = run(tmp_path, "t.json", "--config", str(config), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["turns"][0]["response"] == "from the model"  # its layer failed open
    failed = [e for e in doc["trace"] if e["plugin"] == "stranger" and e["outcome"] != "ok"]
    assert failed and "agent 'reviewer' is not granted" in failed[0]["detail"], doc["trace"]
    # The operator's notice names the grant that allows it, as a missing `agents` does.
    notice, = [line for line in proc.stderr.splitlines() if "was denied" in line]
    assert notice.startswith("wasmext: plugin stranger was denied agents.request in session ")
    assert notice.endswith("; to allow it: wasmext grant stranger agents:reviewer"), notice


def test_an_agent_that_raises_is_told_to_the_operator_with_its_plugin_and_session(
        tmp_path: Path) -> None:
    """A class named without `factory = true` is called with the input and raises
    TypeError. The plugin learns only `failed: TypeError`; the operator's line was on
    --json-logs only, without the plugin, session or hook its record knew, and without
    the exception's type. Now plain `wasmext run` prints it on stderr too."""
    config = project(tmp_path, '[agents.helper]\ntarget = "MODULE:Helper"\n',
                     {"asker": ("helper", ["agents", "agents:helper"])})
    proc = run(tmp_path, "t.json", "--config", str(config), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    failed, = [e for e in doc["trace"] if e["plugin"] == "asker"]
    assert failed["detail"] == "failed: agent 'helper' failed: TypeError", failed
    line, = [ln for ln in proc.stderr.splitlines() if "agent helper failed" in ln]
    assert line.startswith("wasmext: agent helper failed for plugin asker: TypeError: ")
    assert "positional argument" in line  # what the operator's code said is theirs to read

    logged = run(tmp_path, "t.json", "--config", str(config), "--json", "--json-logs")
    assert logged.returncode == 0, logged.stderr
    session = json.loads(logged.stdout)["session"]
    records = [json.loads(ln) for ln in logged.stderr.splitlines() if ln.startswith("{")]
    said, = [r for r in records if r["logger"] == "wasmext.services.agents"]
    assert (said["plugin_id"], said["session"], said["hook"]) == ("asker", session, "turn")
    assert not any("agent helper failed" in ln for ln in logged.stderr.splitlines()
                   if ln.startswith("wasmext: "))  # once, as a JSON line


def test_wasmext_run_holds_a_config_agent_to_the_requests_timeout_and_exits(
        tmp_path: Path) -> None:
    """The agent sleeps 30 s; the plugin asks with timeout_ms 300: the turn goes on with
    `timeout` and the command ends, not waiting for the agent's thread at exit."""
    config = project(tmp_path, '[agents.slow]\ntarget = "MODULE:slow"\n', {})
    digest = asking_plugin(tmp_path / "plugins", "asker", "slow", timeout_ms=300)
    with config.open("a") as f:
        f.write(f'[grants.asker]\ndigest = "sha256:{digest}"\n'
                'capabilities = ["agents", "agents:slow"]\n')
    started = time.monotonic()
    proc = run(tmp_path, "t.json", "--config", str(config), "--json")
    assert time.monotonic() - started < 20  # start-up, a 300 ms wait; not the agent's 30 s
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["turns"][0]["response"] == "from the model"  # the layer failed open
    failed, = [e for e in doc["trace"] if e["plugin"] == "asker"]
    assert failed["outcome"] == "failed"
    assert failed["detail"] == "timeout: agent 'slow' did not answer in time"


def test_a_config_declared_agent_is_held_to_the_call_timeout(
        tmp_path: Path, code_path: Path) -> None:
    config = project(tmp_path, '[agents.slow]\ntarget = "MODULE:slow"\n'
                               '[agents.reviewer]\ntarget = "MODULE:review"\n'
                               '[agents.helper]\ntarget = "MODULE:Helper"\nfactory = true\n',
                     {})
    plugin = turn_wasm({"op": "agents.request", "agent": "slow", "input": "x",
                        "timeout_ms": 300})
    with Host(load_config(config)) as host:
        module = importlib.import_module("wx_cfg_agents")
        assert host.agents.names() == ["helper", "reviewer", "slow"]
        asker = host.add(plugin, plugin_id="asker",
                         grants={"agents", "agents:slow"})
        started = time.monotonic()
        try:
            with pytest.raises(PluginError) as info:
                asker.call("turn")
            assert time.monotonic() - started < 3  # a 300 ms timeout, a 30 s agent
            assert info.value.code == "timeout", info.value.message
            assert "did not answer in time" in info.value.message
            assert module.calls == ["x"]  # it ran: the timeout cut it, not a refusal
        finally:
            module.released.set()
        healthy = host.add(turn_wasm({"op": "agents.request", "agent": "reviewer",
                                      "input": "y"}),
                           plugin_id="healthy", grants={"agents", "agents:reviewer"})
        assert healthy.call("turn").value["response"] == "reviewed y"
        helped = host.add(turn_wasm({"op": "agents.request", "agent": "helper",
                                     "input": "z"}),
                          plugin_id="helped", grants={"agents", "agents:helper"})
        # factory = true: a fresh session per call
        assert [helped.call("turn").value["response"] for _ in range(2)] == [
            "helper 1 got z", "helper 2 got z"]


def test_a_bad_target_fails_every_host_built_from_the_config(code_path: Path,
                                                            tmp_path: Path) -> None:
    config = project(tmp_path, '[agents.typo]\ntarget = "MODULE:nothing.deeper"\n', {})
    with pytest.raises(ConfigError) as info:
        Host(load_config(config))
    assert info.value.problems == (
        ("agents.typo.target", "agent typo: wx_cfg_agents has no attribute 'nothing'"),)
    # Every command that builds its host from the config imports the agents first.
    for command in (["list"], ["mcp", "serve"], ["worker", "--nats", "nats://127.0.0.1:9"]):
        result = CliRunner().invoke(main, [*command, "--config", str(config)])
        assert result.exit_code == 2, (command, result.output)  # an unusable config
        assert "field 'agents.typo.target': agent typo: wx_cfg_agents has no attribute " \
               "'nothing'" in result.stderr, (command, result.output)


def test_a_model_agent_answers_with_the_hosts_model_under_its_system_prompt(
        tmp_path: Path) -> None:
    from wasmext.services.llm.client import ChatAnswer, ChatRequest

    asked: list[ChatRequest] = []

    def model(req: ChatRequest) -> ChatAnswer:
        asked.append(req)
        return ChatAnswer(text=f"summary of {req.messages[-1]['content']}", model=req.model)

    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[llm]\nmodel = "small"\n'
                      '[agents.summarizer]\nsystem = "Summarise in one line."\n'
                      'max_tokens = 64\n'
                      '[agents.big]\nsystem = "Think hard."\nmodel = "big"\n')
    with Host(load_config(config), llm=model) as host:
        plugin = host.add(turn_wasm({"op": "agents.request", "agent": "summarizer",
                                     "input": {"text": "long"}, "timeout_ms": 2000}),
                          plugin_id="asker", grants={"agents", "agents:*"})
        assert plugin.call("turn").value == 'summary of {"text": "long"}'
        big = host.add(turn_wasm({"op": "agents.request", "agent": "big", "input": "q"}),
                       plugin_id="big", grants={"agents", "agents:big"})
        assert big.call("turn").value == "summary of q"
    first, second = asked
    assert first.messages[0] == {"role": "system", "content": "Summarise in one line."}
    assert (first.model, first.max_tokens) == ("small", 64)
    assert 0 < first.timeout_s <= 2  # the request's timeout_ms bounds the model's wait
    assert (second.model, second.max_tokens) == ("big", 1024)
    # Without a model the agent fails, as an agent that raises does.
    with Host(load_config(config)) as host:
        plugin = host.add(turn_wasm({"op": "agents.request", "agent": "summarizer",
                                     "input": "x"}),
                          plugin_id="asker", grants={"agents", "agents:summarizer"})
        with pytest.raises(PluginError) as info:
            plugin.call("turn")
        assert info.value.code == "failed"


def model_agent_config(folder: Path, plugin: str, budgets: str) -> Path:
    """A wasmext.toml with the `summarizer` model agent (max_tokens 64) over the `small`
    model, and `budgets` (TOML lines) as `plugin`'s llm budgets."""
    config = folder / "wasmext.toml"
    config.write_text(f'[host]\ndata_dir = "data"\n[llm]\nmodel = "small"\n'
                      f'[llm.plugins.{plugin}]\n{budgets}\n'
                      '[agents.summarizer]\nsystem = "Summarise."\nmax_tokens = 64\n')
    return config


def test_a_model_agents_tokens_are_charged_to_the_plugin_that_asked(tmp_path: Path) -> None:
    from wasmext.services.llm.client import ChatAnswer, ChatRequest

    def model(req: ChatRequest) -> ChatAnswer:
        return ChatAnswer(text="ok", model=req.model, input_tokens=40, output_tokens=60,
                          usage_reported=True)

    # 100 tokens a call against a session budget of 250 (the reservation counts the
    # prompt's estimate plus max_tokens 64 first): the third request is over it.
    config = model_agent_config(tmp_path, "asker", "max_tokens_per_session = 250")
    with Host(load_config(config), llm=model) as host:
        asker = host.add(turn_wasm({"op": "agents.request", "agent": "summarizer",
                                    "input": "text", "timeout_ms": 2000}),
                         plugin_id="asker", grants={"agents", "agents:summarizer"})
        other = host.add(turn_wasm({"op": "agents.request", "agent": "summarizer",
                                    "input": "text", "timeout_ms": 2000}),
                         plugin_id="other", grants={"agents", "agents:summarizer"})
        session = {"session": "s1"}
        assert asker.call("turn", None, session).value == "ok"
        assert asker.call("turn", None, session).value == "ok"
        assert host.llm.usage("asker")["tokens"] == {"input": 80, "output": 120}
        with pytest.raises(PluginError) as info:  # the session's 250 tokens are spent
            asker.call("turn", None, session)
        assert info.value.code == "limit" and "token budget" in info.value.message
        # Another plugin's own budget is untouched; the model agent needs no llm grant.
        assert other.call("turn", None, session).value == "ok"
        assert host.llm.usage("other")["tokens"] == {"input": 40, "output": 60}
        assert asker.call("turn", None, {"session": "s2"}).value == "ok"  # a new budget


def test_a_storm_of_sends_to_a_model_agent_holds_to_the_plugins_llm_budgets(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Red team, held: agents.send answers at once, so a plugin might hope to run many
    model completions at a time, or past its session's tokens, by sending. Ten sends to a
    stuck model: the agent slots start four runs, the plugin's llm `max_in_flight = 1`
    lets one reach the model (the others fail `limit`, logged), and once its session's
    tokens are spent a send's run is refused the model too."""
    import logging
    import threading

    from wasmext.services.llm.client import ChatAnswer, ChatRequest

    release, asked = threading.Event(), []

    def model(req: ChatRequest) -> ChatAnswer:
        asked.append(req)
        release.wait(10)
        return ChatAnswer(text="ok", model=req.model, input_tokens=40, output_tokens=60,
                          usage_reported=True)

    config = model_agent_config(tmp_path, "sender",
                                "max_in_flight = 1\nmax_tokens_per_session = 250")
    with Host(load_config(config), llm=model) as host, \
            caplog.at_level(logging.WARNING, logger="wasmext.services.agents"):
        sender = host.add(turn_wasm({"op": "agents.send", "agent": "summarizer",
                                     "input": "text"}),
                          plugin_id="sender", grants={"agents", "agents:summarizer"})
        started = time.monotonic()
        codes = []
        for _ in range(10):
            try:
                assert sender.call("turn", None, {"session": "s1"}).value is None
                codes.append("ok")
            except PluginError as err:
                codes.append(err.code)
        assert time.monotonic() - started < 5  # no send waited for the model
        # The agent slots start four runs at once; a run the llm bound refuses hands its
        # slot back at once, so a later send may start one too (how many: timing).
        assert codes[:4] == ["ok"] * 4 and set(codes) <= {"ok", "limit"}, codes
        deadline = time.monotonic() + 5
        while len([r for r in caplog.records if "in flight" in r.getMessage()]) < 3 \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(asked) == 1  # the llm in-flight bound: one completion at a time
        release.set()
        deadline = time.monotonic() + 5
        while host.llm.usage("sender")["tokens"].get("output", 0) < 60 \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        # 100 tokens spent of 250; each send reserves its estimate plus 64: one or two
        # more fit, then the session's budget refuses the model to a sent run too.
        deadline = time.monotonic() + 5
        while not any("token budget" in r.getMessage() for r in caplog.records) \
                and time.monotonic() < deadline:
            with contextlib.suppress(PluginError):  # a slot not handed back yet
                sender.call("turn", None, {"session": "s1"})
            time.sleep(0.02)
        assert any("token budget" in r.getMessage() for r in caplog.records)
        assert 2 <= len(asked) <= 3  # the sends the 250 tokens allow
        assert sum(host.llm.usage("sender")["tokens"].values()) <= 250
        healthy = host.add(turn_wasm({"op": "agents.request", "agent": "summarizer",
                                      "input": "t", "timeout_ms": 2000}),
                           plugin_id="healthy", grants={"agents", "agents:summarizer"})
        assert healthy.call("turn").value == "ok"


def test_a_name_or_target_with_a_line_break_after_it_is_refused(tmp_path: Path) -> None:
    # `$` matches before a final line break: the rules are whole matches.
    config = tmp_path / "wasmext.toml"
    config.write_text('[agents."rev\\n"]\ntarget = "m:f"\n[agents.ok]\ntarget = "m:f\\n"\n')
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert "not an agent name" in str(info.value)
    assert "must be 'package.module:attribute'" in str(info.value)
