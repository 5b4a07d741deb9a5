"""How the command line behaves for a user (issue 12, item 6): one line per error, no
traceback, nothing created by a failed command, exit codes a script can trust."""

from __future__ import annotations

import json
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from wasmext_cli.group import WasmextGroup

ROOT = Path(__file__).resolve().parents[2]
C_HELLO = ROOT / "guest-sdks" / "c" / "examples" / "hello"
# An SGR sequence that sets a foreground or background colour (30-38, 40-48, 90-107).
COLOUR = re.compile(rb"\x1b\[(?:\d+;)*(?:3[0-8]|4[0-8]|9[0-7]|10[0-7])(?:;[\d;]*)?m")


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")]),
            **extra}


def cli(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=cwd,
                          env=env(**extra), capture_output=True, text=True, timeout=300)


def one_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("wasmext: ") and not lines[0].startswith("wasmext: wasmext:")
    return lines[0]


def test_an_unreachable_model_endpoint_is_one_line(tmp_path: Path) -> None:
    proc = cli("run", "--model-url", "http://127.0.0.1:9/v1", "--prompt", "hi", cwd=tmp_path)
    assert proc.returncode != 0
    assert "127.0.0.1:9" in one_line(proc.stderr)


def test_any_command_of_the_group_reports_an_unexpected_error_in_one_line() -> None:
    group = WasmextGroup()

    @group.command()
    def boom() -> None:
        raise RuntimeError("kaput\nsecond line")

    result = CliRunner().invoke(group, ["boom"])
    assert result.exit_code == 1
    assert result.output.strip() == "wasmext: unexpected RuntimeError: kaput second line"


def test_a_config_error_has_one_prefix(tmp_path: Path) -> None:
    (tmp_path / "wasmext.toml").write_text("[host]\ndefault_timeout_ms = 'soon'\n")
    proc = cli("list", cwd=tmp_path)
    assert proc.returncode == 2
    assert "wasmext.toml" in one_line(proc.stderr)


def test_enable_of_an_unknown_plugin_fails_and_creates_nothing(tmp_path: Path) -> None:
    proc = cli("enable", "no-such-plugin", cwd=tmp_path)
    assert proc.returncode == 1
    assert "no-such-plugin" in one_line(proc.stderr)
    assert list(tmp_path.iterdir()) == []


def test_enable_of_a_plugin_in_the_folders_is_remembered(tmp_path: Path) -> None:
    (tmp_path / "wasmext.toml").write_text(f'[plugins]\nworkspace_dir = "{C_HELLO.parent}"\n')
    proc = cli("disable", "hello", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "hello disabled" in proc.stdout


def test_state_rm_of_a_missing_key_fails_like_get(tmp_path: Path) -> None:
    for command in ("get", "rm"):
        proc = cli("state", command, "some-plugin", "nothing-here", cwd=tmp_path)
        assert proc.returncode == 1, command
        assert "nothing-here" in one_line(proc.stderr)


def test_state_export_refuses_binary_to_a_terminal(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "state", "export"],
                              cwd=tmp_path, env=env(), stdout=follower, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    assert proc.returncode == 2
    assert "terminal" in proc.stderr and "Traceback" not in proc.stderr
    piped = subprocess.run([sys.executable, "-m", "wasmext_cli", "state", "export"],
                           cwd=tmp_path, env=env(), capture_output=True, timeout=120)
    assert piped.returncode == 0  # a pipe takes the bytes


def test_state_import_takes_the_format_from_the_extension(tmp_path: Path) -> None:
    assert cli("state", "export", "--format", "json", "-o", "backup.json",
               cwd=tmp_path).returncode == 0
    json.loads((tmp_path / "backup.json").read_text())
    proc = cli("state", "import", "backup.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "backup.bin").write_bytes((tmp_path / "backup.json").read_bytes())
    proc = cli("state", "import", "backup.bin", cwd=tmp_path)
    assert proc.returncode == 2 and "--format" in proc.stderr


def test_list_says_what_it_looked_at_and_exits_by_outcome(tmp_path: Path) -> None:
    (tmp_path / "plugins").mkdir()
    proc = cli("list", cwd=tmp_path)
    assert proc.returncode == 0
    assert "no ./wasmext.toml" in proc.stderr and "--plugins plugins" in proc.stderr
    broken = tmp_path / "plugins" / "broken"
    broken.mkdir()
    (broken / "plugin.toml").write_text('id = "broken"\n')
    proc = cli("list", "--plugins", "plugins", cwd=tmp_path)
    assert proc.returncode == 1  # plugins found, none loaded
    assert "not loaded: manifest:" in proc.stderr and "wasmext: wasmext" not in proc.stderr


def test_call_with_a_grant_has_a_throwaway_state_store(tmp_path: Path) -> None:
    pytest.importorskip("ziglang", reason="the zig toolchain (pip install 'wasmext[build]')")


    from wasmext_cli.build import build_plugin

    folder = tmp_path / "plugin"
    shutil.copytree(ROOT / "guest-sdks" / "c" / "conformance", folder,
                    ignore=shutil.ignore_patterns("*.wasm"))
    build_plugin(folder)
    tmp_path = tmp_path / "cwd"
    tmp_path.mkdir()
    request = {"op": "state.set", "key": "k", "value": 7, "scope": "plugin"}
    proc = cli("call", str(folder), "host", "--grant", "state", "--data", json.dumps(request),
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"ok": True, "value": None}
    assert list(tmp_path.iterdir()) == []  # the store lived in memory
    proc = cli("call", str(folder), "fail", "--data", '"boom"', cwd=tmp_path)
    assert proc.returncode == 1
    assert "hook fail" in one_line(proc.stderr)


@pytest.mark.parametrize("tty", [False, True])
def test_progress_output_has_no_colour_under_no_color(tmp_path: Path, tty: bool) -> None:
    pytest.importorskip("ziglang", reason="the zig toolchain (pip install 'wasmext[build]')")


    project = tmp_path / "hello"
    shutil.copytree(C_HELLO, project, ignore=shutil.ignore_patterns("*.wasm", "*.stamp"))
    if not tty:
        proc = cli("build", cwd=project, NO_COLOR="1")
        assert proc.returncode == 0, proc.stderr
        assert "\x1b" not in proc.stdout + proc.stderr
        assert "building hello: c step 1/1" in proc.stderr
        return
    leader, follower = pty.openpty()
    try:
        proc2 = subprocess.run([sys.executable, "-m", "wasmext_cli", "build"], cwd=project,
                               env=env(NO_COLOR="1", TERM="xterm"), stdout=subprocess.PIPE,
                               stderr=follower, timeout=300)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    assert proc2.returncode == 0
    # Cursor movement and bold are allowed on a terminal; colour is not.
    assert not COLOUR.search(seen)


def test_shell_completion_script(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli"], cwd=tmp_path,
                          env=env(_WASMEXT_COMPLETE="bash_source"), capture_output=True,
                          text=True, timeout=60)
    assert "complete" in proc.stdout and "_WASMEXT_COMPLETE" in proc.stdout


def test_click_group_is_the_shared_one() -> None:
    from wasmext_cli.main import main

    assert isinstance(main, WasmextGroup) and isinstance(main, click.Group)


def _on_a_terminal(args: list[str], cwd: Path, **extra: str) -> tuple[int, bytes]:
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=cwd,
                              env=env(TERM="xterm", COLUMNS="100", **extra), stdout=follower,
                              stderr=subprocess.DEVNULL, timeout=300)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    return proc.returncode, seen


def test_list_is_a_table_on_a_terminal_and_plain_in_a_pipe(tmp_path: Path) -> None:
    pytest.importorskip("ziglang", reason="the zig toolchain (pip install 'wasmext[build]')")
    from wasmext_cli.build import build_plugin

    folder = tmp_path / "plugins" / "hello"
    shutil.copytree(C_HELLO, folder, ignore=shutil.ignore_patterns("*.wasm"))
    build_plugin(folder)
    piped = cli("list", "--plugins", "plugins", cwd=tmp_path)
    assert piped.returncode == 0 and piped.stdout.startswith("hello ")
    assert "\x1b" not in piped.stdout
    code, seen = _on_a_terminal(["list", "--plugins", "plugins"], tmp_path, NO_COLOR="1")
    assert code == 0
    assert "━".encode() in seen or "─".encode() in seen  # a rich table
    assert b"hello(50)" in seen and not COLOUR.search(seen)  # no colour under NO_COLOR


@pytest.mark.parametrize("args", [("limits",), ("run",)])
def test_a_reader_that_goes_away_is_no_error(tmp_path: Path, args: tuple[str, ...]) -> None:
    """`wasmext ... | head`: the pipe closes before the command writes; it stops without an
    error line (and without the interpreter's own complaint at exit)."""
    proc = subprocess.Popen([sys.executable, "-m", "wasmext_cli", *args], cwd=tmp_path,
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=120) == 1
    assert "BrokenPipe" not in stderr and "Exception ignored" not in stderr
    assert not [line for line in stderr.splitlines() if line.startswith("wasmext: ")]
