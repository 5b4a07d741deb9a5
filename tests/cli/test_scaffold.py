"""`wasmext new` writes a project that builds and passes its own test, unchanged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support import SDK_LANGS, Built


@pytest.mark.parametrize("lang", SDK_LANGS)
def test_scaffolded_project_passes_its_test(built: Built, tmp_path: Path, lang: str) -> None:
    built[f"hello-{lang}"]  # skips with the install command when the toolchain is missing
    name = f"my-{lang}-plugin"
    made = subprocess.run([sys.executable, "-m", "wasmext_cli", "new", name, "--lang", lang,
                           "--dir", str(tmp_path)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    project = tmp_path / name
    assert (project / "plugin.toml").read_text().count(f'id = "{name}"') == 1
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                         cwd=project, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


def test_bad_names_and_languages_are_refused(tmp_path: Path) -> None:
    for args in (["new", "Bad_Name", "--lang", "c"], ["new", "ok", "--lang", "cobol"]):
        proc = subprocess.run([sys.executable, "-m", "wasmext_cli", *args, "--dir",
                               str(tmp_path)], capture_output=True, text=True)
        assert proc.returncode == 2
    existing = tmp_path / "taken"
    existing.mkdir()
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "new", "taken", "--lang", "c",
                           "--dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "already exists" in proc.stderr
