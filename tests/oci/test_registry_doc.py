"""docs/registry.md, run: every `wasmext` line of its sh block, in order, as an operator
would type it, against the session's real registry (its address for 127.0.0.1:5000)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import Registry
from oci_support import write_plugin

from wasmext_cli.main import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "registry.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.S)


def test_every_command_of_the_registry_page_runs(registry: Registry, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_plugin(tmp_path, "kb", "installed from the registry")
    runner = CliRunner()
    outputs: dict[str, list[str]] = {}
    digest = ""
    [block] = _blocks("sh")
    for line in block.splitlines():
        if not line.startswith("wasmext "):
            continue
        line = line.replace("127.0.0.1:5000", registry.address)
        line = line.replace("sha256:DIGEST-PRINTED-BY-PUSH", digest)
        args = shlex.split(line)[1:]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, f"{line}\n{result.output}"
        outputs.setdefault(args[0], []).append(result.output)
        if args[0] == "keygen":  # the operator pastes the key into the config
            toml = _blocks("toml")[0].replace("ed25519:PASTE-THE-PRINTED-KEY",
                                              result.output.strip())
            (tmp_path / "wasmext.toml").write_text(toml)
        if args[0] == "push":
            found = re.search(r"\((sha256:[0-9a-f]{64})\)", result.output)
            assert found, result.output
            digest = found.group(1)
    assert len(outputs["install"]) == 2 and digest in outputs["install"][1]
    assert "installed from the registry" in outputs["call"][0]
    assert (tmp_path / "plugins" / "kb" / "WXB-SIGNATURE.json").is_file()
