"""The day's token budget outlives the process and is shared by hosts on one store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from test_llm_complete import ASK, llm_wasm, refused

from support import ROOT, free_port
from wasmext import Host, PluginError, Runtime
from wasmext.config import HostConfig
from wasmext.services.llm.client import ChatAnswer, ChatRequest
from wasmext.services.llm.ledger import LEDGER_SCOPE
from wasmext.services.llm.service import LlmPolicy, LlmSettings, estimate_tokens

ESTIMATE = estimate_tokens(ASK["messages"])  # 15: "Summarise" 3, six words 6, ":" "." 2, 4
RESERVED = ESTIMATE + 100  # plus its max_tokens
TIMEOUT = {"timeout_ms": 5000}


def model(input_tokens: int = 150, output_tokens: int = 100) -> tuple[list[str], object]:
    asked: list[str] = []

    def complete(req: ChatRequest) -> ChatAnswer:
        asked.append(req.model)
        return ChatAnswer("ok", "stop", input_tokens, output_tokens, req.model)
    return asked, complete


def host(data_dir: Path, per_day: int, llm: object, **config: object) -> Host:
    settings = LlmSettings(model="m", default=LlmPolicy(max_tokens_per_day=per_day))
    return Host(HostConfig(data_dir=data_dir, llm=settings, **config),  # type: ignore[arg-type]
                runtime=Runtime(cache=False), plugin_dirs=[], llm=llm)  # type: ignore[arg-type]


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def test_the_days_budget_survives_a_restart(tmp_path: Path) -> None:
    asked, complete = model()  # 250 tokens a call, as the model reports
    with host(tmp_path, 1000, complete) as first:
        plugin = first.add(llm_wasm(ASK), plugin_id="spender", grants={"llm"}, limits=TIMEOUT)
        for _ in range(4):
            plugin.call("test")
        assert first.llm.ledger.used("spender", today()) == 1000
    with host(tmp_path, 1000, complete) as second:  # a restart: same data_dir
        plugin = second.add(llm_wasm(ASK), plugin_id="spender", grants={"llm"}, limits=TIMEOUT)
        assert "today's token budget" in refused(plugin, "limit", 2)
        assert len(asked) == 4  # the model was not asked again
        healthy = second.add(llm_wasm(ASK), plugin_id="healthy", grants={"llm"},
                             limits=TIMEOUT)
        assert healthy.call("test").value["text"] == "ok"
        assert LEDGER_SCOPE not in second.plugins  # no plugin can name the ledger's scope


_CHILD = """
import sys, time
from pathlib import Path
from wasmext import Host, Runtime
from wasmext.config import HostConfig
from wasmext.services.llm.service import LlmPolicy, LlmSettings, estimate_tokens

data_dir, wasm, marker = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])

def complete(req):
    marker.write_text("asked")
    time.sleep(60)  # killed while the model answers

settings = LlmSettings(model="m", default=LlmPolicy(max_tokens_per_day=200, timeout_ms=90_000))
with Host(HostConfig(data_dir=data_dir, llm=settings), runtime=Runtime(cache=False),
          plugin_dirs=[], llm=complete) as host:
    plugin = host.add(wasm.read_bytes(), plugin_id="spender", grants={"llm"},
                      limits={"timeout_ms": 90_000})
    plugin.call("test")
"""


def test_a_kill_while_the_model_answers_keeps_the_reservation(tmp_path: Path) -> None:
    wasm, marker = tmp_path / "asker.wasm", tmp_path / "asked"
    wasm.write_bytes(llm_wasm(ASK))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_CHILD), str(tmp_path),
                              str(wasm), str(marker)], env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, child.stderr.read() if child.stderr else b""
            assert time.monotonic() < deadline, "the model was never asked"
            time.sleep(0.02)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    asked, complete = model()
    with host(tmp_path, 200, complete) as after:
        assert after.llm.ledger.used("spender", today()) == RESERVED  # spent, never lost
        plugin = after.add(llm_wasm(ASK), plugin_id="spender", grants={"llm"}, limits=TIMEOUT)
        with pytest.raises(PluginError) as refused:
            plugin.call("test")  # 115 + 115 > 200
        assert refused.value.code == "limit" and asked == []


def test_hosts_sharing_a_store_cannot_overrun_it_together(tmp_path: Path) -> None:
    _, complete = model(ESTIMATE, 100)  # each call spends exactly what it reserved
    hosts = [host(tmp_path, 10 * RESERVED, complete) for _ in range(2)]
    outcomes: list[str] = []
    lock = threading.Lock()

    def spend(h: Host) -> None:
        plugin = h.plugins["spender"].plugin
        while True:
            try:
                plugin.call("test")
                outcome = "ok"
            except PluginError as err:
                outcome = err.code
            with lock:
                outcomes.append(outcome)
            if outcome != "ok":
                return

    try:
        for h in hosts:
            h.add(llm_wasm(ASK), plugin_id="spender", grants={"llm"}, limits=TIMEOUT)
        threads = [threading.Thread(target=spend, args=(h,)) for h in hosts for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert outcomes.count("ok") == 10
        assert set(outcomes) == {"ok", "limit"}
        assert hosts[0].llm.ledger.used("spender", today()) == 10 * RESERVED
    finally:
        for h in hosts:
            h.close()


def test_an_unreachable_store_refuses_rather_than_grants(tmp_path: Path) -> None:
    asked, complete = model()
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with host(tmp_path, 1000, complete, state_backend="redis", state_url=url) as h:
        plugin = h.add(llm_wasm(ASK), plugin_id="spender", grants={"llm"}, limits=TIMEOUT)
        assert "token ledger" in refused(plugin, "unavailable", 5)
        assert asked == []
