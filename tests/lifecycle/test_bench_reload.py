"""benchmarks/bench_reload.py runs end to end and reports its figures (never judged here)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from lc_support import ROOT, cli_env


def test_reload_benchmark_reports_its_figures(tmp_path: Path) -> None:
    import sys

    out = tmp_path / "reload.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_reload.py"),
                           "--quick", "--json", str(out)], env=cli_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert set(doc["figures"]) == {"steady", "during_reloads", "rescan_unchanged",
                                   "rescan_one_reload"}
    assert doc["failed_calls"] == 0 and doc["reloads_during_calls"] > 0
    assert "call_p50_during_reloads_vs_steady" in doc["ratios"]
