"""Acceptance: a plugin shipped as a Python wheel (issue 28, item 2).

The commands of docs/writing-plugins.md ("Ship it as a Python package") run as written:
`wasmext new --package` scaffolds a C plugin with a pyproject.toml, it is built,
packed into a wheel by pip with hatchling and installed (from that wheel only, no
index) into a fresh venv beside the wheel of this checkout. In that venv `wasmext
list` shows the plugin only when wasmext.toml enables entry-point discovery, with no
grants until the operator runs `wasmext grant`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # two wheels and a fresh venv

ROOT = Path(__file__).resolve().parents[2]


DOC = ROOT / "docs" / "writing-plugins.md"


def _doc_commands() -> list[str]:
    """The `$ ` lines of the console block of the "Ship it as a Python package" section."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Ship it as a Python package"):]
    block = re.search(r"```console\n(.*?)```", section, flags=re.S)
    assert block is not None
    return [ln[2:] for ln in block.group(1).splitlines() if ln.startswith("$ ")]


def _run(*args: str | Path, cwd: Path, env: dict[str, str], timeout: int = 900
         ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"{proc.args}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_a_plugin_wheel_is_found_only_when_enabled_and_granted_only_by_the_operator(
        tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "WASMEXT_SDK_DIR", "VIRTUAL_ENV")}
    here = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    # A fresh venv with this checkout's wheel (its dependencies from the index) and
    # hatchling, the scaffold's build backend.
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, ROOT,
         cwd=tmp_path, env=env)
    host_wheel = next(dist.glob("wasmext-*.whl"))
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path, env=env)
    py = venv / "bin" / "python"
    _run(py, "-m", "pip", "install", "-q", host_wheel, "hatchling", cwd=tmp_path, env=env,
         timeout=1800)
    # The author's side: docs/writing-plugins.md's commands, as written. `wasmext` is
    # this checkout (with its compilers); pip is the fresh venv's, with no index.
    cwd = tmp_path
    for line in _doc_commands():
        args = shlex.split(line)
        if args[0] == "cd":
            cwd = cwd / args[1]
        elif args[0] == "wasmext":
            if args[1] == "build":  # the plugin asks for a capability the operator withholds
                manifest = cwd / "plugin.toml"
                manifest.write_text(manifest.read_text(encoding="utf-8").replace(
                    "abi = 1", 'abi = 1\ncapabilities = ["state"]', 1), encoding="utf-8")
            _run(sys.executable, "-m", "wasmext_cli", *args[1:], cwd=cwd, env=here)
        elif args[:2] == ["pip", "wheel"]:
            _run(py, "-m", *args, "--no-build-isolation", "--no-index", "-q", cwd=cwd, env=env)
        else:
            assert args[:2] == ["pip", "install"], line
            _run(py, "-m", *args, "--no-index", "--find-links", dist, "-q", cwd=cwd, env=env)
    project = tmp_path / "greeter"
    dist = project / "dist"
    plugin_wheel = next(dist.glob("wasmext_plugin_greeter-*.whl"))
    with zipfile.ZipFile(plugin_wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        declared = zf.read(entry_points).decode()
    assert {"wasmext_plugin_greeter/plugin.toml", "wasmext_plugin_greeter/greeter.wasm"} <= names
    assert not any(n.endswith((".c", ".py")) for n in names)  # the module, not its sources
    assert "[wasmext.plugins]" in declared and "greeter = wasmext_plugin_greeter" in declared

    # The operator's side, in a folder with no plugins of its own.
    work = tmp_path / "work"
    (work / "plugins").mkdir(parents=True)
    wasmext = str(venv / "bin" / "wasmext")
    venv_env = {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    config = work / "wasmext.toml"

    def listed() -> dict[str, dict[str, object]]:
        proc = subprocess.run([wasmext, "list", "--json"], cwd=work, env=venv_env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert str(ROOT) not in proc.stdout  # the installed host, not this checkout
        return {p["id"]: p for p in json.loads(proc.stdout)["plugins"]}

    config.write_text('[plugins]\nworkspace_dir = "plugins"\n', encoding="utf-8")
    assert "greeter" not in listed()  # off by default
    config.write_text('[plugins]\nworkspace_dir = "plugins"\nentry_points = true\n',
                      encoding="utf-8")
    found = listed()
    assert found["greeter"]["source"] == "package"
    assert found["greeter"]["grants"] == []  # asked for state; nobody granted it
    called = subprocess.run([wasmext, "call", str(next(venv.glob(
        "lib/python3*/site-packages/wasmext_plugin_greeter"))), "greet", "--data", '"Ada"'],
        cwd=work, env=venv_env, capture_output=True, text=True, timeout=300)
    assert "Hello, Ada!" in called.stdout, called.stderr
    _run(wasmext, "grant", "greeter", "state", "--by", "operator", cwd=work, env=venv_env)
    assert listed()["greeter"]["grants"] == ["state"]
    # pip owns the files: uninstalling through wasmext is refused, nothing removed.
    refused = subprocess.run([wasmext, "uninstall", "greeter"], cwd=work, env=venv_env,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "pip uninstall" in refused.stderr
    assert listed()["greeter"]["grants"] == ["state"]
