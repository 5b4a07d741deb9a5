"""The benchmark command runs end to end and reports every figure it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
