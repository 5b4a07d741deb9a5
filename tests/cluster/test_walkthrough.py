"""docs/cluster.md's three-worker walkthrough, line by line, on a free port."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import PYTHONPATH, free_port, nats_server_binary, wait_for_port

from support import ROOT


def walkthrough() -> list[str]:
    doc = (ROOT / "docs" / "cluster.md").read_text()
    block = doc.split("<!-- walkthrough")[1].split("<!-- end walkthrough -->")[0]
    body = block.split("```sh\n")[1].split("```")[0]
    return [line for line in body.splitlines() if line.strip()]


def test_the_walkthrough_runs(plugin_dir: Path, tmp_path: Path, spawn: Any) -> None:
    binary = nats_server_binary()
    assert binary is not None  # plugin_dir and nats_url skip when it is missing
    port = free_port()
    outputs: list[str] = []
    for n, line in enumerate(walkthrough()):
        line = line.replace("4222", str(port)).replace("--plugins plugins",
                                                       f"--plugins {plugin_dir}")
        background = line.endswith("&")
        argv = shlex.split(line.rstrip("&"))
        program = {"nats-server": [binary], "wasmext": [sys.executable, "-m", "wasmext_cli"],
                   "python": [sys.executable]}[argv[0]]
        argv = program + argv[1:]
        if background:
            proc = spawn(f"step{n}", argv=argv)
            if argv[0] == binary:
                wait_for_port(port, proc.proc)
            else:
                proc.wait_ready()
            continue
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={"PYTHONPATH": PYTHONPATH, "PATH": ""})
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    listing, first, trusted = outputs
    assert re.search(r"wasmext-agent-guard\s+0\.1\.0\s+3\s", listing)
    lines = [json.loads(x) for x in first.splitlines()]
    assert lines[0] == {"text": "hello", "blocked": False, "payload": "hello"}
    assert lines[1]["blocked"] and "agent-guard: banned word: password" in lines[1]["reason"]
    spread = lines[2]["agent-guard"]["by_worker"]
    assert set(spread) == {"w1", "w2", "w3"} and sum(spread.values()) == 60
    assert json.loads(trusted.splitlines()[0])["blocked"] is False
