"""A registered hook name one typo from a hook the host calls is a load error saying
"did you mean"; a plugin's own hook names (far from all of them) load as before."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wasmext import Plugin, Runtime, UnknownHook
from wasmext._abi import HOOKS
from wasmext.sandbox.plugin import Registration
from wasmext.testing import guest_wat, load_wat

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("typo", "meant"), [
    ("on_plain_txt", "on_plain_text"),
    ("sesion_start", "session_start"),
    ("before_tools", "before_tool"),
    ("ontag", "on_tag"),
    ("tool_cal", "tool_call"),
    ("output_extensions", "output_extension"),
])
def test_a_typo_of_a_host_hook_is_refused_at_load(runtime: Runtime, healthy: Plugin,
                                                  typo: str, meant: str) -> None:
    started = time.monotonic()
    with pytest.raises(UnknownHook) as err:
        load_wat(runtime, guest_wat(hooks=("greet", typo)), plugin_id="typo")
    assert time.monotonic() - started < 10
    line = err.value.describe()
    assert f"did you mean {meant!r}?" in line and f"hooks[1] is {typo!r}" in line
    assert line.startswith("plugin typo hook register: unknown hook: ")
    assert healthy.call("test").value == "alive"


@pytest.mark.parametrize("name", ["greet", "echo", "test", "stop", "remember", "on_plain_text",
                                  "session_start", "on_resource"])
def test_own_hook_names_and_host_hooks_load(runtime: Runtime, name: str) -> None:
    plugin = load_wat(runtime, guest_wat(hooks=(name,)), plugin_id="own")
    assert plugin.registration.hook_names == (name,)


@given(st.sampled_from(sorted(HOOKS)), st.integers(0, 40), st.sampled_from("xqz_"))
def test_one_letter_off_a_long_host_hook_names_it(hook: str, at: int, letter: str) -> None:
    at %= len(hook)
    typo = hook[:at] + letter + hook[at + 1:]
    if typo == hook or typo in HOOKS or len(hook) < 8:
        return  # a short name one letter off is as likely a name of its own
    with pytest.raises(UnknownHook) as err:
        Registration.parse({"hooks": [{"hook": typo}]}, "p")
    assert "did you mean" in err.value.message


@given(st.text(min_size=1, max_size=200))
def test_any_hook_name_parses_or_is_one_named_error(name: str) -> None:
    line = ""
    try:
        Registration.parse({"hooks": [{"hook": name}]}, "p")
    except UnknownHook as err:
        line = err.describe()
    assert "\n" not in line and "\x1b" not in line
    assert not line or "did you mean" in line


@pytest.mark.slow
def test_a_real_plugin_with_a_typo_fails_wasmext_call_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("ziglang", reason="the zig toolchain (pip install 'wasmext[build]')")
    folder = tmp_path / "hello"
    shutil.copytree(ROOT / "guest-sdks" / "c" / "examples" / "hello", folder,
                    ignore=shutil.ignore_patterns("*.wasm", "*.stamp"))
    source = folder / "hello.c"
    source.write_text(source.read_text().replace('WASMEXT_HOOK("greet"',
                                                 'WASMEXT_HOOK("on_plain_txt"'))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    built = subprocess.run([sys.executable, "-m", "wasmext_cli", "build", str(folder)],
                           env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "call", str(folder),
                           "on_plain_text", "--data", '"hi"'],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("wasmext: plugin hello hook register: unknown hook: ")
    assert "did you mean 'on_plain_text'?" in lines[0]
