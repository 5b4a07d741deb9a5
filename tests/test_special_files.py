"""A FIFO, a device or a folder where the host expects a file it reads at start.

Every such read goes through `wasmext.files.read_regular`: the file is refused
with a named error (naming the file and what it is) within a moment, never
waited on; the host then still serves a healthy plugin. Through the embedding
API (each reader, and Host) and the command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from wasmext import ConfigError, Host, LoadError, UnsafeFile, WasmextError, load_config
from wasmext.config import EnableState
from wasmext.files import locked, read_regular
from wasmext.hooks.pipeline import load_policy
from wasmext.lifecycle.approvals import ApprovalStore
from wasmext.lifecycle.signing import load_private_key
from wasmext.manifest import load_manifest
from wasmext.mcp.server.auth import load_token
from wasmext.models import load_transcript
from wasmext.sandbox.module import PluginModule
from wasmext.testing import guest_wat

ROOT = Path(__file__).resolve().parent.parent
REFUSED_WITHIN_S = 2.0   # a FIFO is refused at once; waiting on it would never end
CLI_WITHIN_S = 60.0      # a whole interpreter start on a shared machine
KINDS = ["fifo", "device", "folder"]


def make_special(path: Path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")  # what the name opens is a character device
    else:
        path.mkdir()


def bounded(fn: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """Run `fn` in a thread; fail (instead of hanging) if it waits on the file."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(REFUSED_WITHIN_S * 5)
    assert not thread.is_alive(), "waited on a special file"
    assert time.monotonic() - started < REFUSED_WITHIN_S
    return box.get("value"), box.get("error")


def refused(fn: Callable[[], Any], named: type[BaseException]) -> str:
    _, error = bounded(fn)
    assert isinstance(error, named), repr(error)
    message = str(error)
    assert "not a regular file" in message, message
    assert "Traceback" not in message
    return message


def plugin_folder(root: Path, pid: str) -> Path:
    folder = root / pid
    folder.mkdir(parents=True)
    wat = guest_wat(response={"ok": True, "value": "alive"}, registration={
        "hooks": [{"hook": "test"}]})
    (folder / f"{pid}.wasm").write_bytes(wasmtime.wat2wasm(wat))
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "1.0.0"\n')
    return folder


def workspace(tmp_path: Path) -> Path:
    plugin_folder(tmp_path / "plugins", "healthy")
    cfg = tmp_path / "wasmext.toml"
    cfg.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    return cfg


def assert_healthy(cfg: Path) -> None:
    with Host(load_config(cfg)) as host:
        assert host.plugins["healthy"].plugin.call("test").value == "alive"


def cli(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cwd / "xdg"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=CLI_WITHIN_S)
    return proc, time.monotonic() - started


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.mark.parametrize("kind", KINDS)
def test_read_regular_refuses_what_is_not_a_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "thing"
    make_special(path, kind)
    message = refused(lambda: read_regular(path, 1024), UnsafeFile)
    assert str(path) in message
    assert {"fifo": "FIFO", "device": "device", "folder": "folder"}[kind] in message
    regular = tmp_path / "regular"
    regular.write_bytes(b"x" * 10)
    assert read_regular(regular, 10) == b"x" * 10
    with pytest.raises(UnsafeFile, match="larger than 9 bytes") as info:
        read_regular(regular, 9)
    assert info.value.too_large and isinstance(info.value, OSError)


@pytest.mark.parametrize("kind", KINDS)
def test_every_start_time_reader_refuses_a_special_file(tmp_path: Path, kind: str) -> None:
    special = tmp_path / "special"
    make_special(special, kind)
    config = load_config(workspace(tmp_path))
    readers: list[tuple[Callable[[], Any], type[BaseException]]] = [
        (lambda: load_config(special), ConfigError),
        (lambda: load_policy(special), ConfigError),
        (lambda: load_manifest(special), ConfigError),
        (lambda: load_token(special), ConfigError),
        (lambda: load_private_key(special), ConfigError),
        (lambda: load_transcript(special), ConfigError),
        (lambda: ApprovalStore(special).all(), ConfigError),
        (lambda: PluginModule.from_file(special), LoadError),
    ]
    for reader, named in readers:
        refused(reader, named)
    data = config.data_dir
    make_special(data / "plugins.json", kind)
    refused(lambda: EnableState(config), ConfigError)
    (data / "plugins.json").unlink() if kind != "folder" else (data / "plugins.json").rmdir()
    make_special(data / "plugins.json.lock", kind)
    _, error = bounded(lambda: EnableState(config).set("healthy", False))
    assert isinstance(error, ConfigError) and "plugins.json.lock" in str(error)


@pytest.mark.parametrize("kind", KINDS)
def test_approvals_json_that_is_not_a_file(tmp_path: Path, kind: str) -> None:
    cfg = workspace(tmp_path)
    make_special(tmp_path / "data" / "approvals.json", kind)
    # The host starts (an unreadable approvals file grants nothing) ...
    host, error = bounded(lambda: Host(load_config(cfg)))
    assert error is None, repr(error)
    with host:
        assert host.plugins["healthy"].plugin.call("test").value == "alive"
    # ... and the operator's commands name the file.
    for args in (["grants"], ["grant", "healthy", "state"]):
        proc, took = cli(tmp_path, *args, "--config", str(cfg))
        assert took < CLI_WITHIN_S and proc.returncode != 0
        assert "approvals.json" in proc.stderr and "not a regular file" in proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_plugins_json_that_is_not_a_file(tmp_path: Path, kind: str) -> None:
    cfg = workspace(tmp_path)
    state = tmp_path / "data" / "plugins.json"
    make_special(state, kind)
    refused(lambda: Host(load_config(cfg)), ConfigError)
    proc, took = cli(tmp_path, "list", "--config", str(cfg))
    assert took < CLI_WITHIN_S and proc.returncode != 0
    assert "plugins.json" in proc.stderr and "not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc, _ = cli(tmp_path, "disable", "healthy", "--config", str(cfg))
    assert proc.returncode != 0 and "not a regular file" in proc.stderr
    state.unlink() if kind != "folder" else state.rmdir()
    assert_healthy(cfg)


@pytest.mark.parametrize("kind", KINDS)
def test_config_and_token_files_that_are_not_files_on_the_cli(tmp_path: Path,
                                                             kind: str) -> None:
    cfg = workspace(tmp_path)
    special = tmp_path / "special"
    make_special(special, kind)
    # (click itself refuses a folder given for a file option, by name too)
    named = ("not a regular file",) + (("is a directory",) if kind == "folder" else ())
    proc, took = cli(tmp_path, "list", "--config", str(special))
    assert took < CLI_WITHIN_S and proc.returncode != 0
    assert any(n in proc.stderr for n in named) and "Traceback" not in proc.stderr
    proc, took = cli(tmp_path, "mcp", "serve", "--config", str(cfg), "--http", "1",
                     "--token-file", str(special))
    assert took < CLI_WITHIN_S and proc.returncode != 0
    assert any(n in proc.stderr for n in named) and "Traceback" not in proc.stderr
    assert_healthy(cfg)


def test_a_module_that_is_a_fifo_beside_a_healthy_plugin(tmp_path: Path) -> None:
    cfg = workspace(tmp_path)
    folder = tmp_path / "plugins" / "piped"
    folder.mkdir()
    (folder / "plugin.toml").write_text('id = "piped"\nversion = "1.0.0"\n')
    os.mkfifo(folder / "piped.wasm")
    host, error = bounded(lambda: Host(load_config(cfg)))
    assert error is None, repr(error)
    with host:
        assert sorted(host.plugins) == ["healthy"]
        assert any("piped" in e.message for e in host.load_errors)
        assert host.plugins["healthy"].plugin.call("test").value == "alive"
    message = refused(lambda: host.runtime.load(folder / "piped.wasm", plugin_id="piped"),
                      LoadError)
    assert "piped.wasm" in message


def test_the_lock_is_exclusive_and_bounded(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    with locked(lock):
        started = time.monotonic()
        script = ("import sys; from wasmext.files import locked\n"
                  "try:\n    with locked(sys.argv[1], timeout_s=0.3): pass\n"
                  "except TimeoutError as e: print('timeout', e)\n")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "host")}
        out = subprocess.run([sys.executable, "-c", script, str(lock)], env=env,
                             capture_output=True, text=True, timeout=CLI_WITHIN_S).stdout
        assert out.startswith("timeout") and "x.lock" in out
        assert time.monotonic() - started < CLI_WITHIN_S
    with locked(lock, timeout_s=0.3):  # released when the block ended
        pass
    assert issubclass(UnsafeFile, WasmextError)


def test_a_running_host_whose_plugins_json_becomes_a_fifo(tmp_path: Path) -> None:
    cfg = workspace(tmp_path)
    with Host(load_config(cfg)) as host:
        host.disable("healthy")
        host.enable("healthy")
        state = tmp_path / "data" / "plugins.json"
        state.unlink()
        os.mkfifo(state)
        report, error = bounded(host.rescan)
        assert error is None, repr(error)
        assert any("plugins.json" in e.message and "not a regular file" in e.message
                   for e in report.errors)
        host.rescan()  # the choices read before still decide
        assert host.plugins["healthy"].plugin.call("test").value == "alive"
