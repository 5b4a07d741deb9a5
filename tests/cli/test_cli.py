"""`wasmext call` and `wasmext inspect` on inline-WAT plugins (SDK builds are in test_sdks)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest
import wasmtime
from click.testing import CliRunner

from wasmext import OutOfFuel, Runtime, Timeout
from wasmext.testing import DATA_AT, guest_wat, load_wat
from wasmext_cli.main import main


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return CliRunner()


def write(tmp_path: Path, name: str, wat: str) -> Path:
    path = tmp_path / f"{name}.wasm"
    path.write_bytes(wasmtime.wat2wasm(wat))
    return path


def test_call_prints_json(cli: CliRunner, tmp_path: Path) -> None:
    wasm = write(tmp_path, "answer", guest_wat(response={"ok": True, "value": {"n": [1, 2]},
                                                        "stop": True}))
    result = cli.invoke(main, ["call", str(wasm), "test", "--data", '{"x": 1}'])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"n": [1, 2]}


def test_unchanged_prints_the_input(cli: CliRunner, tmp_path: Path) -> None:
    wasm = write(tmp_path, "same", guest_wat("(i64.const 0)"))
    result = cli.invoke(main, ["call", str(wasm), "test", "--data", '"as is"'])
    assert json.loads(result.stdout) == "as is"


@pytest.mark.parametrize(("body", "options", "reason"), [
    ("(loop (br 0)) (i64.const 0)", ["--fuel", "10000"], "out of fuel"),
    ("(loop (br 0)) (i64.const 0)", ["--timeout-ms", "30", "--fuel", "10000000000"], "timeout"),
    ("(loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) unreachable",
     ["--memory-mb", "2"], "memory limit"),
    ("(call $r) (i64.const 0)", [], "stack overflow"),
    ("(i64.const -1)", [], "invalid output"),
    ("unreachable", [], "trap"),
])
def test_faults_exit_nonzero_with_one_line(cli: CliRunner, tmp_path: Path, body: str,
                                           options: list[str], reason: str) -> None:
    wat = guest_wat(body, extra="(func $r (call $r))")
    wasm = write(tmp_path, "bad-plugin", wat)
    result = cli.invoke(main, ["call", str(wasm), "test", *options])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"wasmext: plugin bad-plugin hook test: {reason}:")


def test_abi_error_names_abi(cli: CliRunner, tmp_path: Path) -> None:
    wasm = write(tmp_path, "old", guest_wat(abi_version=0))
    result = cli.invoke(main, ["call", str(wasm), "test"])
    assert result.exit_code == 1
    assert ": abi:" in result.stderr


def test_guest_error_is_reported(cli: CliRunner, tmp_path: Path) -> None:
    wasm = write(tmp_path, "says-no", guest_wat(response={
        "ok": False, "error": {"code": "failed", "message": "nope"}}))
    result = cli.invoke(main, ["call", str(wasm), "test"])
    assert result.exit_code == 1
    assert result.stderr.strip() == "wasmext: plugin says-no hook test: failed: nope"


def test_bad_data_is_a_usage_error(cli: CliRunner, tmp_path: Path) -> None:
    wasm = write(tmp_path, "x", guest_wat())
    result = cli.invoke(main, ["call", str(wasm), "test", "--data", "{oops"])
    assert result.exit_code == 2
    assert "--data" in result.output


def test_inspect(cli: CliRunner, tmp_path: Path) -> None:
    wasm = write(tmp_path, "shown", guest_wat(registration={
        "hooks": [{"hook": "on_tag", "priority": 80, "pattern": "think*"}],
        "name": "Shown", "version": "2.0.0", "tools": [{"name": "t"}]}))
    result = cli.invoke(main, ["inspect", str(wasm), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["hooks"] == [{"hook": "on_tag", "priority": 80, "pattern": "think*"}]
    assert info["abi"]["major"] == 1
    assert info["size"] == wasm.stat().st_size
    assert info["digest"].startswith("sha256:")
    assert info["extra"] == {"tools": [{"name": "t"}]}
    text = cli.invoke(main, ["inspect", str(wasm)]).stdout
    assert "on_tag" in text and "priority 80" in text and "pattern think*" in text


WASI_IMPORTS = "".join(
    f'(import "wasi_snapshot_preview1" "{name}" (func ${name} {sig}))\n' for name, sig in (
        ("fd_write", "(param i32 i32 i32 i32) (result i32)"),
        ("fd_read", "(param i32 i32 i32 i32) (result i32)"),
        ("fd_close", "(param i32) (result i32)"),
        ("random_get", "(param i32 i32) (result i32)"),
        ("clock_time_get", "(param i32 i64 i32) (result i32)"),
        ("environ_sizes_get", "(param i32 i32) (result i32)"),
        ("args_sizes_get", "(param i32 i32) (result i32)")))


def test_inspect_wraps_a_long_import_list(cli: CliRunner, tmp_path: Path) -> None:
    wasm = write(tmp_path, "wasi", guest_wat(imports=WASI_IMPORTS))
    text = cli.invoke(main, ["inspect", str(wasm)]).stdout
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("imports"))
    shown = [lines[at][10:]]
    shown += [line[10:] for line in lines[at + 1:] if line.startswith(" " * 10 + "wasi")]
    assert len(shown) > 1 and all(len(line) <= 110 for line in lines[at:at + len(shown)])
    names = " ".join(shown)
    assert all(name in names for name in ("fd_write", "random_get", "args_sizes_get"))


def _costly_registration(body: str | None = None) -> str:
    """A guest whose wasmext_register burns some 100,000 loop turns before answering."""
    head = '(func (export "wasmext_register") (param i32 i32) (result i64)'
    wat = guest_wat(body)
    assert wat.count(head) == 1
    return wat.replace(head, head + " (local $i i32) (loop $l (local.set $i (i32.add "
                       "(local.get $i) (i32.const 1))) (br_if $l (i32.lt_u (local.get $i) "
                       "(i32.const 100000))))")


def test_fuel_bounds_the_call_not_the_registration(cli: CliRunner, tmp_path: Path) -> None:
    """--fuel below what the registration costs: a cheap hook still answers, and a
    hook that loops runs out of fuel in the call, not at load."""
    cheap = write(tmp_path, "slow-start", _costly_registration())
    result = cli.invoke(main, ["call", str(cheap), "test", "--fuel", "20000"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == "ok"
    spins = write(tmp_path, "slow-spin", _costly_registration("(loop (br 0)) (i64.const 0)"))
    result = cli.invoke(main, ["call", str(spins), "test", "--fuel", "20000"])
    assert result.exit_code == 1
    assert result.stderr.startswith("wasmext: plugin slow-spin hook test: out of fuel:")
    assert "used all 20000 fuel in wasmext_call" in result.stderr


# A WASI sleep of 200 ms (one relative clock subscription): a wasmext guest's sleep that
# would pass its call's deadline ends that call with Timeout at once.
SLEEP_200MS = struct.pack("<QB7xIxxxxQQH6x", 7, 0, 1, 200_000_000, 0, 0)
POLL_IMPORT = ('(import "wasi_snapshot_preview1" "poll_oneoff" '
               '(func $poll_oneoff (param i32 i32 i32 i32) (result i32)))')
SLEEP = (f"(drop (call $poll_oneoff (i32.const {DATA_AT}) (i32.const 30000) (i32.const 1) "
         "(i32.const 30100)))")


def _sleepy_registration(hook_sleeps: bool) -> str:
    """A guest whose wasmext_register sleeps 200 ms, and whose hook answers at once or
    sleeps 200 ms too."""
    head = '(func (export "wasmext_register") (param i32 i32) (result i64)'
    wat = guest_wat(f"{SLEEP} (i64.const 0)" if hook_sleeps else None, imports=POLL_IMPORT,
                    data=SLEEP_200MS)
    assert wat.count(head) == 1
    return wat.replace(head, head + " " + SLEEP)


def test_timeout_bounds_the_call_not_the_registration(cli: CliRunner, tmp_path: Path) -> None:
    """--timeout-ms 50, below the registration's 200 ms: a quick hook still answers (the
    load keeps the host's default deadline), and a hook that sleeps 200 ms is stopped at
    the call's 50 ms with Timeout, named, not at load."""
    quick = write(tmp_path, "slow-start", _sleepy_registration(hook_sleeps=False))
    result = cli.invoke(main, ["call", str(quick), "test", "--timeout-ms", "50"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == "ok"
    sleeps = write(tmp_path, "slow-hook", _sleepy_registration(hook_sleeps=True))
    started = time.monotonic()
    result = cli.invoke(main, ["call", str(sleeps), "test", "--timeout-ms", "50"])
    assert time.monotonic() - started < 5  # the load's 200 ms, then at most 50 ms
    assert result.exit_code == 1
    assert result.stderr.startswith("wasmext: plugin slow-hook hook test: timeout:"), \
        result.stderr
    assert "ran past 50 ms" in result.stderr and "200 ms sleep" in result.stderr


def test_call_limits_are_a_calls_only() -> None:
    """Plugin.set_call_limits takes a hook call's fuel and deadline, nothing an instance
    holds whatever it runs (its memory), and no value a limit cannot be."""
    with Runtime() as rt:
        plugin = load_wat(rt, guest_wat(), "plain")
        with pytest.raises(TypeError, match="'memory_bytes' is no call limit"):
            plugin.set_call_limits(memory_bytes=1 << 20)
        with pytest.raises(ValueError, match="timeout_ms must be a positive int"):
            plugin.set_call_limits(timeout_ms=0)
        plugin.set_call_limits(timeout_ms=250)
        assert plugin.call("test").value == "ok"
        assert plugin.call_limits == {"timeout_ms": 250}
        assert plugin.limits.timeout_ms == 1000  # the load's, for every registration
        # A spinning hook loaded with a minute is stopped at the call's 50 ms.
        spinner = load_wat(rt, guest_wat("(loop (br 0)) (i64.const 0)"), "spinner",
                           limits={"timeout_ms": 60_000, "fuel_per_call": 10**13})
        spinner.set_call_limits(timeout_ms=50)
        started = time.monotonic()
        with pytest.raises(Timeout, match="ran past 50 ms"):
            spinner.call("test")
        assert time.monotonic() - started < 10


def test_fuel_is_lowered_by_the_manifest(cli: CliRunner, tmp_path: Path) -> None:
    """A plugin's [limits] request lowers --fuel for its calls, as it lowers a load's."""
    folder = tmp_path / "frugal"
    folder.mkdir()
    spin = guest_wat("(loop (br 0)) (i64.const 0)")
    (folder / "frugal.wasm").write_bytes(wasmtime.wat2wasm(spin))
    (folder / "plugin.toml").write_text('id = "frugal"\nversion = "0.1.0"\nabi = 1\n'
                                        'wasm = "frugal.wasm"\n\n[limits]\nfuel_per_call = 3000\n')
    result = cli.invoke(main, ["call", str(folder), "test", "--fuel", "20000"])
    assert result.exit_code == 1
    assert "used all 3000 fuel in wasmext_call" in result.stderr


def test_call_fuel_reaches_instances_made_after_a_fault() -> None:
    """Plugin.set_call_fuel: a fault discards the instance; the next one registers under
    the load's fuel and is again held to the call's."""
    with Runtime() as rt:
        plugin = load_wat(rt, _costly_registration("(loop (br 0)) (i64.const 0)"), "spinner")
        plugin.set_call_fuel(20000)
        for _ in range(2):
            with pytest.raises(OutOfFuel, match="used all 20000 fuel in wasmext_call"):
                plugin.call("test")
        assert plugin.limits.fuel_per_call > 20000  # the load's, for every registration
