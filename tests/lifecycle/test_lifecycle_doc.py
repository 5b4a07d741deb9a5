"""docs/lifecycle.md, run: every `wasmext` line of its sh blocks, in order, as an operator
would type it (the CLI in a subprocess, in a fresh folder)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from lc_support import ROOT, cli, cli_env, write_plugin

pytestmark = pytest.mark.slow  # every command of the page, each its own process

DOC = ROOT / "docs" / "lifecycle.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_every_command_of_the_lifecycle_page_runs(tmp_path: Path) -> None:
    write_plugin(tmp_path, "kb", "v1", tools=["find"])
    env = cli_env()
    outputs: dict[str, list[str]] = {}
    packs = 0
    for block in _blocks("sh"):
        for line in block.splitlines():
            if not line.startswith("wasmext "):
                continue
            args = shlex.split(line.partition("#")[0])[1:]
            if args[:1] == ["pack"]:
                packs += 1
                if packs == 2:  # "a new version": the operator rebuilt kb
                    write_plugin(tmp_path, "kb", "v2", tools=["find", "more"])
            done = subprocess.run(cli(*args), cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=120)
            assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
            outputs.setdefault(args[0], []).append(done.stdout)
            if args[0] == "keygen":  # the operator pastes the key into the config
                toml = _blocks("toml")[0].replace("ed25519:PASTE-THE-PRINTED-KEY",
                                                  done.stdout.strip())
                (tmp_path / "wasmext.toml").write_text(toml)
    assert packs == 2 and len(outputs["install"]) == 2
    assert "kb" in outputs["list"][0]
    assert "active" in outputs["grants"][0]
    assert "withheld (module changed)" in outputs["grants"][1]
    assert "signed by ed25519:" in outputs["inspect"][0]
    assert "state entries purged" in outputs["uninstall"][0]
    assert not (tmp_path / "plugins" / "kb").exists()
