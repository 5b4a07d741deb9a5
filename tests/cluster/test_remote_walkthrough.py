"""docs/cluster.md's remote-plugins walkthrough, line by line (docs/cluster_remote_demo.py):
three workers serve the example session's plugins with their state on JetStream, a host
with none of its own plays it, a worker killed with SIGKILL mid-session loses
nothing, and the host's and the workers' spans, sent to the shipped OTLP/HTTP receiver on
loopback, form one trace of the session."""

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
from wasmext.observe.otlp_receiver import ReceivedSpan


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
    built, granted, played, session, traced = demo.run(tmp_path)
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
    # A turn the fail-closed turn-counter stopped is named too: by its fault above, or,
    # on a loaded machine, by a JetStream commit of its count that outlived the call's
    # deadline (StateUnavailable, said by the worker: storage, nobody's fault).
    assert all("turn-counter" in f["error"] for f in result["failed"]), result
    late = [f for f in result["failed"] if "state unavailable" in f["error"]]
    rounds_hit = {f["round"] for f in result["named_faults"] + result["failed"]}
    assert result["same_as_first"] >= 30 - len(rounds_hit)
    assert rounds_hit or result["same_as_first"] == 30
    # The state is either before or after each counting call, never half or twice: a
    # call answered counted once; one whose commit answer came too late counted once or
    # not at all (the worker could not know which), never twice.
    counted, answered = result["turns_counted"], result["counting_calls_answered"]
    assert answered <= counted <= answered + len(late), result
    assert answered + len(late) + len([f for f in result["named_faults"]
                                       if f["plugin"] == "turn-counter"]) == 30, result
    by_worker = result["answers_by_worker"]
    assert set(by_worker) <= {"w1", "w2", "w3"} and by_worker["w1"] and by_worker["w3"]
    # w2 answered only what it took before it died (its first round's share, at most).
    assert by_worker.get("w2", 0) < by_worker["w1"] / 4
    # One trace: the session's. The caller's spans and those of at least two workers
    # share its id; each worker's request span hangs under a caller's remote-call span.
    trace_id = result["trace_id"]
    spans = [ReceivedSpan.from_json(line) for line in
             (tmp_path / "demo" / "spans.jsonl").read_text().splitlines()]
    mine = [s for s in spans if s.trace_id == trace_id]
    by_id = {s.span_id: s for s in mine}
    caller = {s.span_id: s for s in mine if s.service == "wasmext-host"}
    served = [s for s in mine if s.name == "wasmext.worker plugin"]
    assert all(s.service == "wasmext-worker" for s in served)
    workers = {s.attributes["wasmext.worker"] for s in served}
    assert {"w1", "w3"} <= workers <= {"w1", "w2", "w3"}, workers
    for span in served:
        assert span.instance == span.attributes["wasmext.worker"]  # --name, as the resource
        parent = caller.get(span.parent_span_id)
        assert parent is not None and parent.name == "wasmext.remote plugin", span
        assert parent.attributes["wasmext.plugin_id"] == span.attributes["wasmext.plugin_id"]
    # The caller's tree is whole: one root, the session, and every other caller span's
    # parent arrived, w2's death notwithstanding.
    assert [s.name for s in caller.values() if not s.parent_span_id] == ["wasmext.session"]
    assert all(s.parent_span_id in caller for s in caller.values() if s.parent_span_id)
    # Only a span of the killed worker's can miss its parent (w2's request span, never
    # ended); the live workers' spans all lead up to one of theirs.
    lost = [s for s in mine if s.parent_span_id and s.parent_span_id not in by_id]
    assert all(s.instance == "w2" and s.name != "wasmext.worker plugin" for s in lost), lost
    assert len(lost) <= 10, lost  # the ended inner spans of the one call w2 held, at most
    # A call w2 held and another worker answered: its client span says it took two
    # attempts, and the answering worker's span is beneath it.
    retried = [s for s in caller.values() if s.attributes.get("wasmext.attempts")]
    assert len(retried) <= result["retries"] and bool(retried) == bool(result["retries"])
    for call in retried:
        children = [s for s in served if s.parent_span_id == call.span_id]
        if call.attributes.get("wasmext.outcome") == "ok":
            assert {s.attributes["wasmext.worker"] for s in children} & {"w1", "w3"}, call
    # trace.py, the walkthrough's last line, says the same.
    summary = json.loads(traced)
    assert summary["trace_id"] == trace_id and summary["roots"] == ["wasmext.session"]
    assert summary["worker_spans_under_a_caller_span"] == sum(summary["worker_spans"].values())
    assert all(m.startswith("wasmext-worker w") for m in summary["missing_parent"])
    # Late batches (the live workers flush when stopped) only add to what it saw.
    assert summary["spans"] <= len(mine)
    assert summary["services"]["wasmext-host"] == len(caller)
