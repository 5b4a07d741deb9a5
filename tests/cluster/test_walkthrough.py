"""docs/cluster.md's three-worker walkthrough, line by line (docs/cluster_demo.py), on a
free port."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from cluster_support import free_port

from support import ROOT


def test_the_walkthrough_runs(plugin_dir: Path, nats_url: str, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("cluster_demo",
                                                  ROOT / "docs" / "cluster_demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    listing, first, trusted = demo.run(free_port(), plugin_dir, tmp_path)
    assert re.search(r"wasmext-agent-guard\s+0\.1\.0\s+3\s", listing)
    lines = [json.loads(x) for x in first.splitlines()]
    assert lines[0] == {"text": "hello", "blocked": False, "payload": "hello"}
    assert lines[1]["blocked"] and "agent-guard: banned word: password" in lines[1]["reason"]
    spread = lines[2]["agent-guard"]["by_worker"]
    assert set(spread) == {"w1", "w2", "w3"} and sum(spread.values()) == 60
    assert json.loads(trusted.splitlines()[0])["blocked"] is False
