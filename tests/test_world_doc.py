"""docs/world_example.py runs as docs/world.md shows it, and the doc maps every
reference system's terms to wasmext's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_world_example_runs() -> None:
    from wasmext_cli.build import build_plugin

    build_plugin(ROOT / "guest-sdks" / "c" / "conformance")
    out = subprocess.run([sys.executable, str(ROOT / "docs" / "world_example.py")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == '{"summary": "a short meeting"} {\'input\': 20, \'output\': 8} 7.8e-06'
    assert lines[1] == "{'verdict': 'fine', 'input': 'ping'}"
    assert lines[2] == "{'tokens': {'input': 20, 'output': 8}, 'cost': 7.8e-06}"


def test_every_reference_has_a_term_table() -> None:
    text = (ROOT / "docs" / "world.md").read_text()
    for ref in ("000", "001", "002", "003", "004"):
        # a heading line naming the reference, followed by a two-column table
        heading = rf"\(references? [^)]*`{ref}`[^)]*\):\n\n"
        match = re.search(heading + r"\| reference (?:term|feature) \| wasmext \|", text)
        assert match, f"docs/world.md has no term table for reference {ref}"
