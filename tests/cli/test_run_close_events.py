"""Events still queued when `wasmext run` ends reach the plugins subscribed to them:
tests/plugins/event-tally (C, subscribed to `turn.*`, slow on purpose) counts each
topic in its state, read back with `wasmext state get` after the command exited."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from support import Built

TURNS = 6  # each turn emits turn.started and turn.completed: 12 turn.* events


def wasmext(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], capture_output=True,
                          text=True, timeout=120, cwd=folder)


def setup(built: Built, tmp_path: Path, spin: int) -> Path:
    folder = tmp_path / "plugins" / "event-tally"
    shutil.copytree(built["event-tally"], folder)
    digest = hashlib.sha256((folder / "event-tally.wasm").read_bytes()).hexdigest()
    (tmp_path / "transcript.json").write_text(json.dumps({"model": "replay", "turns": [
        {"user": f"turn {n}", "steps": [{"response": f"answer {n}"}]} for n in range(TURNS)]}))
    config = tmp_path / "wasmext.toml"
    config.write_text(
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n'
        f'[grants.event-tally]\ndigest = "sha256:{digest}"\n'
        'capabilities = ["events", "subscribe:turn.*", "state"]\n'
        f'[plugin.event-tally]\nsettings = {{ spin = {spin} }}\n'
        'limits = { timeout_ms = 5000 }\n')
    return config


def delivered(tmp_path: Path, config: Path, topic: str) -> int:
    proc = wasmext(tmp_path, "state", "get", "event-tally", topic, "--config", str(config))
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def test_a_slow_turn_subscriber_gets_all_twelve_events_under_run(built: Built,
                                                                 tmp_path: Path) -> None:
    # Each delivery spins long enough that most of the 12 events are still queued when
    # the last turn ends: only close's flush gets them to the plugin.
    config = setup(built, tmp_path, spin=400_000)
    proc = wasmext(tmp_path, "run", "transcript.json", "--config", str(config), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["plugins"] == ["event-tally"] and len(doc["turns"]) == TURNS
    assert delivered(tmp_path, config, "turn.started") == TURNS
    assert delivered(tmp_path, config, "turn.completed") == TURNS
