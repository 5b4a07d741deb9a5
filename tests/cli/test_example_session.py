"""`wasmext run` with no arguments plays the example session shipped in the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wasmext_cli.example import DOCS_FILES, PLUGINS, example_root

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = example_root()


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_run_without_arguments_plays_the_example_session(tmp_path: Path) -> None:
    proc = cli("run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "example session" in proc.stderr
    for hook in ("session_start", "on_plain_text", "validator", "before_tool", "on_tag",
                 "output_extension", "on_llm_output"):
        assert f"  {hook} " in proc.stdout, hook
    assert "agent-guard blocked tool shell" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # its state lived in a temporary folder


def test_a_config_in_the_folder_wins_over_the_example(tmp_path: Path) -> None:
    (tmp_path / "wasmext.toml").write_text("[host]\nauto_enable = true\n")
    proc = cli("run", cwd=tmp_path)
    assert proc.returncode == 2 and "TRANSCRIPT" in proc.stderr
    assert "example session" not in proc.stderr


def test_the_shipped_copies_match_their_sources() -> None:
    for name in DOCS_FILES:
        assert (EXAMPLE / name).read_bytes() == (ROOT / "docs" / "examples" / name).read_bytes()
    for plugin in PLUGINS:
        assert (EXAMPLE / "plugins" / plugin / "plugin.toml").read_bytes() == \
            (ROOT / "plugins" / plugin / "plugin.toml").read_bytes(), \
            "refresh with: python -m wasmext_cli.example --refresh"


def test_the_prebuilt_modules_are_what_the_sources_build(tmp_path: Path) -> None:
    pytest.importorskip("ziglang", reason="the zig toolchain (pip install 'wasmext[build]')")
    from wasmext_cli.build import build_plugin

    for plugin in PLUGINS:
        fresh = build_plugin(ROOT / "plugins" / plugin, out_dir=tmp_path).wasm.read_bytes()
        shipped = (EXAMPLE / "plugins" / plugin / f"{plugin}.wasm").read_bytes()
        assert fresh == shipped, (f"{plugin}: the shipped module is stale; refresh with: "
                                  "python -m wasmext_cli.example --refresh")
