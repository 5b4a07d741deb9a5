"""docs/cluster.md's remote-plugins walkthrough, line by line (docs/cluster_remote_demo.py):
three workers serve the example session's plugins with their state on JetStream, a host
with none of its own plays it, and a worker killed with SIGKILL mid-session loses
nothing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cluster_support import PYTHONPATH, nats_server_binary

from support import ROOT


def _turns(report: dict[str, Any]) -> list[Any]:
    """What each turn answered, without the times and ids that differ every run."""
    kept = ("name", "param", "content", "success", "error", "plugin", "output_target")
    return [{**{k: t.get(k) for k in ("user", "response", "aborted", "tool_calls")},
             "extensions": [{k: e.get(k) for k in kept} for e in t.get("extensions", [])]}
            for t in report["turns"]]


@pytest.mark.slow
def test_the_remote_walkthrough_runs(tmp_path: Path) -> None:
    if nats_server_binary() is None:
        pytest.skip("needs nats-server")
    spec = importlib.util.spec_from_file_location("cluster_remote_demo",
                                                  ROOT / "docs" / "cluster_remote_demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    built, granted, played, session = demo.run(tmp_path)
    assert "built" in built and "granted state to turn-counter" in granted
    # The example session, every plugin on a worker, answers as it does in one process.
    local = subprocess.run([sys.executable, "-m", "wasmext_cli", "run", "--json"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": PYTHONPATH}, check=True)
    remote_report, local_report = json.loads(played), json.loads(local.stdout)
    for remote_turn, local_turn in zip(_turns(remote_report), _turns(local_report),
                                       strict=True):
        for key, value in local_turn.items():
            assert remote_turn[key] == value, key
    # Every hook kind fired as in-process, and turn-counter's before_agent besides.
    assert remote_report["hooks_fired"] == sorted({*local_report["hooks_fired"],
                                                   "before_agent"})
    assert remote_report["load_errors"] == []
    assert remote_report["plugins"] == sorted([*local_report["plugins"], "turn-counter"])
    # Thirty rounds in one session, w2 killed after the first: nothing lost.
    result = json.loads(session)
    # Each round answered as the first, or met a named fault per its plugin's policy:
    # a middleware call w2 held after it had run the caller's inner layers is not
    # retried (they would run twice) but fails as RemoteUnavailable.
    assert result["different_without_a_named_fault"] == 0, result
    assert all(f["error"] in ("remote unavailable", "timeout")
               for f in result["named_faults"]), result
    assert result["same_as_first"] >= 30 - len({f["round"] for f in result["named_faults"]})
    assert result["named_faults"] or result["same_as_first"] == 30
    # The state is either before or after each counting call, never half or twice.
    assert result["turns_counted"] == result["counting_calls_answered"]
    assert result["turns_counted"] + len([f for f in result["named_faults"]
                                          if f["plugin"] == "turn-counter"]) == 30
    by_worker = result["answers_by_worker"]
    assert set(by_worker) <= {"w1", "w2", "w3"} and by_worker["w1"] and by_worker["w3"]
    # w2 answered only what it took before it died (its first round's share, at most).
    assert by_worker.get("w2", 0) < by_worker["w1"] / 4
