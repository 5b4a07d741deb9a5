"""docs/events-and-metrics.md, run: the python blocks of its plugin-metrics and ticks
sections, each as a script in a fresh interpreter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "events-and-metrics.md"


def test_the_metrics_and_ticks_examples_run(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Plugin-defined metrics"):text.index("## Structured logs")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    for n, block in enumerate(blocks):
        script = tmp_path / f"block{n}.py"
        script.write_text(block, encoding="utf-8")
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    assert "wasmext_plugin_heartbeat__ticks_total" in done.stdout
