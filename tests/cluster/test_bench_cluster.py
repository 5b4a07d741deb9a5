"""The cluster benchmark runs end to end and reports every figure it promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_support import PYTHONPATH, nats_server_binary

from support import ROOT

pytestmark = pytest.mark.slow  # a benchmark-sized run


def test_the_cluster_benchmark_reports_latency_and_throughput(tmp_path: Path,
                                                              nats_url: str) -> None:
    assert nats_server_binary() is not None
    out = tmp_path / "cluster.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_cluster.py"),
                           "--quick", "--json", str(out)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    for key in ("in_process", "remote_json", "remote_msgpack", "hook_local", "hook_remote"):
        assert doc[key]["p50_us"] > 0 and doc[key]["p99_us"] >= doc[key]["p50_us"]
    assert set(doc["throughput_runs_per_s"]) == {"1", "2", "4"}
    assert all(v > 0 for v in doc["throughput_runs_per_s"].values())
    assert "remote/in-process p50" in proc.stdout
    # A whole plugin's hook over NATS beside the same call in-process, in the same run.
    assert doc["hook_remote_vs_local_p50"] > 0 and "remote hook call/local p50" in proc.stdout
    # The floors and the fast paths, from the same run.
    assert doc["echo"]["p50_us"] > 0 and doc["echo"]["runs_per_s"] > 0
    assert doc["remote_vs_echo_p50"] > 0 and set(doc["throughput_vs_echo"]) == {"1", "2", "4"}
    # Each throughput row beside its own floor, asked the same way, measured just before it.
    for key in ("echo_runs_per_s", "threaded_runs_per_s", "echo_threads_runs_per_s",
                "threaded_vs_echo_threads"):
        assert set(doc[key]) == {"1", "2", "4"} and all(v > 0 for v in doc[key].values()), key
    for w, ratio in doc["throughput_vs_echo"].items():
        assert ratio == round(doc["throughput_runs_per_s"][w] / doc["echo_runs_per_s"][w], 2)
    # The row's pair is one of the pairs measured (one with --quick, three in a full run).
    assert [doc["echo_runs_per_s"]["1"], doc["throughput_runs_per_s"]["1"]] in \
        doc["throughput_pairs_1"] and len(doc["throughput_pairs_1"]) == 1
    assert doc["remote_async"]["runs_per_s"] > 0 and doc["async_throughput_vs_echo"] > 0
    assert doc["inline_worker"]["runs_per_s"] > 0 and doc["inline_worker"]["async"]["p50_us"] > 0
    assert "bare echo" in proc.stdout
    # The same worker on uvloop, beside the rows on asyncio's own loop (wasmext.loops).
    plain = doc["uvloop_worker"]
    assert plain["runs_per_s"] > 0 and plain["echo_runs_per_s"] > 0 and plain["p50_us"] > 0
    assert plain["throughput_vs_echo"] == round(plain["runs_per_s"] / plain["echo_runs_per_s"], 2)
    assert "1 worker on uvloop (--loop uvloop" in proc.stdout


def test_one_run_reports_remote_vs_local_and_jetstream_vs_redis(tmp_path: Path,
                                                                nats_url: str) -> None:
    """Issue 29's benchmark acceptance: `run.py --state-only --cluster` times a remote hook
    call against a local one and JetStream state against Redis in the same run."""
    assert nats_server_binary() is not None
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick",
                           "--state-only", "--cluster", "--json", str(out)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    figures = doc["cluster_acceptance"]
    for key in ("hook_local_p50_us", "hook_remote_p50_us", "hook_remote_vs_local",
                "redis_get_p50_us", "jetstream_get_p50_us", "jetstream_vs_redis_get",
                "redis_set_p50_us", "jetstream_set_p50_us", "jetstream_vs_redis_set"):
        assert figures[key] > 0, key
    # Every figure comes from this one document: the run's own rows and cluster section.
    assert figures["jetstream_set_p50_us"] == doc["results"]["state.jetstream.set"]["p50_us"]
    assert figures["hook_remote_p50_us"] == doc["cluster"]["hook_remote"]["p50_us"]
    assert "cluster (issue 29), one run" in proc.stdout
