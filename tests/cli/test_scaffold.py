"""`wasmext new` writes a project that builds and passes its own test, unchanged."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import SDK_LANGS, Built
from wasmext.manifest import load_folder
from wasmext_cli.languages import SCAFFOLD_LANGUAGES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # each scaffold builds and runs its own pytest
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


NATIVE_FILES = {
    "c": ["compile_flags.txt", "wasmext-sdk/include/wasmext.h", "wasmext-sdk/src/plugin.c"],
    "zig": ["build.zig", "build.zig.zon", "wasmext-sdk/src/wasmext.zig"],
    "rust": ["Cargo.toml", "wasmext-sdk/Cargo.toml", "wasmext-sdk/src/lib.rs"],
    "go": ["go.mod", "wasmext-sdk/go.mod"],
    "assemblyscript": ["package.json", "wasmext-sdk/package.json"],
    "python": ["app.py", "wasmext-sdk/wasmext_guest/__init__.py", "wasmext-sdk/wit/plugin.wit"],
    "javascript": ["package.json", "wasmext-sdk/package.json", "wasmext-sdk/componentize.mjs"],
}


@pytest.mark.parametrize("lang", sorted(NATIVE_FILES))
def test_scaffold_is_a_native_project(tmp_path: Path, lang: str) -> None:
    """The language's own project files, a vendored SDK, .gitignore, README and a test
    that imports nothing but wasmext's public API; no toolchain needed to scaffold."""
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "new", "demo", "--lang", lang,
                           "--dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    project = tmp_path / "demo"
    for rel in [*NATIVE_FILES[lang], ".gitignore", "README.md", "pytest.ini", "test_demo.py"]:
        assert (project / rel).is_file(), rel
    assert "*.wasm" in (project / ".gitignore").read_text()
    test_source = (project / "test_demo.py").read_text()
    assert "wasmext_cli" not in test_source and "from wasmext.testing import" in test_source
    # The SDK's own examples and tests stay out of the vendored copy.
    assert not (project / "wasmext-sdk" / "examples").exists()
    # Its guide's links to wasmext's own guides (../../abi/SPEC.md) led out of the project
    # into nothing: they name the command that prints the guide instead.
    for page in project.rglob("*.md"):
        if "node_modules" in page.parts:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith(("#", "mailto:")):
                continue
            resolved = (page.parent / target.split("#", 1)[0]).resolve()
            assert resolved.is_relative_to(project.resolve()) and resolved.exists(), \
                (page, target)
    assert "`wasmext docs spec`" in (project / "wasmext-sdk" / "README.md").read_text()
    readme = (project / "README.md").read_text()
    if lang == "rust":
        assert 'wasmext = { path = "wasmext-sdk" }' in (project / "Cargo.toml").read_text()
        # The compiler pip does not bring is named with how to get it.
        assert "rustup target add wasm32-unknown-unknown" in readme
    if lang == "go":
        assert "Go 1.24 or newer" in readme
        assert "replace wasmext.dev/wasmext => ./wasmext-sdk" in (project / "go.mod").read_text()
    if lang == "assemblyscript":
        deps = json.loads((project / "package.json").read_text())["dependencies"]
        assert deps["@wasmext/as-sdk"] == "file:wasmext-sdk" and "assemblyscript" in deps
    if lang == "javascript":
        # The project pins the componentize-js its SDK was tested with.
        pins = json.loads((project / "wasmext-sdk" / "package.json").read_text())
        deps = json.loads((project / "package.json").read_text())["devDependencies"]
        assert deps == pins["devDependencies"]


def test_new_refuses_a_missing_parent_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "new", "x", "--lang", "c",
                           "--dir", str(missing)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "no such folder" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "no").exists()


def test_a_javascript_project_without_node_says_how_to_install_it(tmp_path: Path) -> None:
    """The installed wheel carries no node_modules: a JavaScript project fetches its pinned
    componentize-js with npm, and without node on PATH the build is one line naming the
    install command."""
    made = subprocess.run([sys.executable, "-m", "wasmext_cli", "new", "js-demo", "--lang",
                           "javascript", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    no_tools = tmp_path / "empty-bin"
    no_tools.mkdir()
    code = os.pathsep.join(str(ROOT / part) for part in ("host", "cli"))
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "build"], cwd=tmp_path / "js-demo",
                          env={**os.environ, "PATH": str(no_tools), "PYTHONPATH": code},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "js-demo" in lines[0] and "apt-get install nodejs npm" in lines[0]
    assert not (tmp_path / "js-demo" / "js-demo.wasm").exists()


@pytest.mark.parametrize("lang", SCAFFOLD_LANGUAGES)
def test_scaffold_registers_under_the_project_name(tmp_path: Path, lang: str) -> None:
    """The source's registration names the project, not the SDK example it came from."""
    proc = subprocess.run([sys.executable, "-m", "wasmext_cli", "new", "my-demo", "--lang",
                           lang, "--dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    project = tmp_path / "my-demo"
    build = load_folder(project).build
    assert build is not None
    sources = "".join((project / rel).read_text() for rel in build.sources)
    assert sources.count('"my-demo"') == 1
    assert '"hello"' not in sources


def test_a_built_scaffold_shows_its_own_name(built: Built, tmp_path: Path) -> None:
    built["hello-c"]  # skips with the install command when the toolchain is missing
    made = subprocess.run([sys.executable, "-m", "wasmext_cli", "new", "greeter", "--lang", "c",
                           "--dir", str(tmp_path)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    project = tmp_path / "greeter"
    for args in (["build"], ["inspect", ".", "--json"]):
        proc = subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=project,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert (info["id"], info["name"]) == ("greeter", "greeter")
