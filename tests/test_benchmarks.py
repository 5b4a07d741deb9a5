"""The benchmark command runs end to end and reports every figure it promises."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # benchmark-sized runs

ROOT = Path(__file__).resolve().parent.parent


def test_quick_benchmark_reports_figures_and_ratios(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    text = json.dumps(doc)
    for figure in ("wasmext.plugin_call", "naive.full_call", "subprocess.cat",
                   "fresh.wasmext_instance.wasi"):
        assert figure in text, figure
    assert "vs_subprocess_cat" in text
    assert "p50" in text and "p99" in text
    # Issue 14's figures: each target's ratio against its floor, from this same run.
    costs = doc["costs"]
    for key in ("startup_import", "startup_help", "startup_call", "host_layer", "host_call",
                "tool_schema", "echo_100k", "asession", "watchdog"):
        assert costs[key]["ratio"] is not None and costs[key]["ratio"] > 0, key
        assert costs[key]["floor"] in doc["results"] and costs[key]["subject"] in doc["results"]
    assert "where users pay" in proc.stdout
    # Issue 25's figures, each beside its floor from the same run.
    for key in ("http_fetch", "llm_complete", "sqlite_set_100k", "generic_host_call",
                "host_call_vs_log", "new_instance"):
        assert costs[key]["ratio"] is not None and costs[key]["ratio"] > 0, key
        assert costs[key]["floor"] in doc["results"] and costs[key]["subject"] in doc["results"]
    if shutil.which("redis-server"):  # Redis state.set against a plain SET, same run
        assert costs["redis_set"]["ratio"] is not None and costs["redis_set"]["ratio"] > 0
    if (ROOT / "plugins" / "pii-mask" / "pii-mask.wasm").is_file():  # built by make plugins
        rss = costs["rss_per_copy"]
        assert rss["copy_bytes"] > 0 and rss["instance_bytes"] > 0 and rss["ratio"] > 0


def test_profile_takes_the_session_apart() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_call.py"),
                           "--session", "--iters", "300", "--rounds", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for stage in ("Session.on_plain_text (whole)", "Plugin.call (the sandbox)",
                  "metrics.record_callback"):
        assert stage in proc.stdout, stage


def test_scale_run_reports_the_many_plugins_rows(tmp_path: Path) -> None:
    # The 100-plugin rows are left out of a quick full run (100 modules compiled here,
    # 200 in a child process); `--scale-only` keeps them.
    out = tmp_path / "scale.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick",
                           "--scale-only", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    chain = doc["costs"]["chain_100"]  # both sides make the same 100 plugin calls
    assert chain["ratio"] > 0 and chain["floor"] in doc["results"]
    assert chain["subject"] in doc["results"]
    distinct = doc["costs"]["rss_per_distinct_plugin"]  # beside a bare wasmtime instance
    assert distinct["plugin_bytes"] > 0 and distinct["bare_bytes"] > 0
    assert "redis_set" in doc["costs"]  # measured beside them when redis-server is installed


# The cost tools behind docs/performance.md's per-request figures: run small, each must
# still print its figure (the caller side of nats_path_cost.py had stopped running once
# NatsLink's client became a property).
COST_TOOLS = [
    ("nats_path_cost.py", ["--side", "worker", "--rounds", "1", "--n", "64"],
     "worker path, CPU us per request"),
    ("nats_path_cost.py", ["--side", "caller", "--rounds", "1", "--n", "64"],
     "caller path, CPU us per request"),
    ("nats_path_cost.py", ["--side", "caller", "--bare", "--rounds", "1", "--n", "64"],
     "caller path, CPU us per request"),
    ("stagecall_cost.py", ["--rounds", "1", "--per-round", "50"], "stage"),
    ("hostcall_cost.py", ["--rounds", "1", "--per-round", "50"], "get/none"),
    ("instance_cost.py", ["--rounds", "1", "--per-round", "5"], "us"),
]


@pytest.mark.parametrize(("tool", "args", "says"), COST_TOOLS,
                         ids=[f"{t}{''.join(a[:2])}" for t, a, _ in COST_TOOLS])
def test_each_cost_tool_still_runs(tool: str, args: list[str], says: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / tool), *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert says in proc.stdout, proc.stdout[-2000:]
