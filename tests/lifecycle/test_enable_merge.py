"""Enable/disable from several processes: no writer undoes another's change.

Every writer (the CLI, each running host) locks `plugins.json.lock`, reads the
file again and changes only its own entry. Tested with real processes: the CLI
beside a running host, and two processes writing at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from lc_support import cli, cli_env, write_plugin

from wasmext import Host

BOUND_S = 60.0  # interpreter starts on a shared machine; the lock waits milliseconds


def workspace(tmp_path: Path) -> Path:
    for pid in ("a", "b", "healthy"):
        write_plugin(tmp_path / "plugins", pid)
    cfg = tmp_path / "wasmext.toml"
    cfg.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    return cfg


def recorded(tmp_path: Path) -> dict[str, bool]:
    doc = json.loads((tmp_path / "data" / "plugins.json").read_text())
    return dict(doc["enabled"])


def test_a_running_host_keeps_the_clis_change(tmp_path: Path) -> None:
    cfg = workspace(tmp_path)
    started = time.monotonic()
    with Host.from_config(cfg) as host:
        assert sorted(host.plugins) == ["a", "b", "healthy"]
        # Another process disables a while the host runs (its state read at start) ...
        proc = subprocess.run(cli("disable", "a", "--config", str(cfg)), env=cli_env(),
                              capture_output=True, text=True, timeout=BOUND_S)
        assert proc.returncode == 0, proc.stderr
        # ... then the host disables b: a stays disabled.
        host.disable("b")
        assert recorded(tmp_path) == {"a": False, "b": False}
        assert host.plugins["healthy"].plugin.call("test").value == "v1"
    with Host.from_config(cfg) as again:
        assert sorted(again.plugins) == ["healthy"]
        assert again.plugins["healthy"].plugin.call("test").value == "v1"
    assert time.monotonic() - started < BOUND_S


WRITER = """
import sys
from pathlib import Path
from wasmext import HostConfig
from wasmext.config import EnableState
name, data, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
state = EnableState(HostConfig(data_dir=data))  # read once, like a long-running host
for i in range(count):
    state.set(f"{name}-{i}", i % 2 == 0)
"""


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    count = 40
    started = time.monotonic()
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, name, str(data), str(count)],
                                env=cli_env(), stderr=subprocess.PIPE, text=True)
               for name in ("one", "two")]
    for writer in writers:
        _, err = writer.communicate(timeout=BOUND_S)
        assert writer.returncode == 0, err
    assert time.monotonic() - started < BOUND_S
    expected = {f"{name}-{i}": i % 2 == 0 for name in ("one", "two") for i in range(count)}
    assert recorded(tmp_path) == expected
    leftovers = [p.name for p in data.iterdir() if p.name.startswith(".plugins.json.tmp")]
    assert leftovers == []
