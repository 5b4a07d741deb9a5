"""Each guest SDK is a package of its ecosystem, ready to publish (issue 12, item 3):
the Rust crate packages offline, the npm package is public and packs, the Go module
vets. Each test skips only when its toolchain is missing, naming the install."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SDKS = Path(__file__).resolve().parents[2] / "guest-sdks"
SKIP = shutil.ignore_patterns("node_modules", "target", "*.wasm", ".zig-cache")


def _tool(name: str, hint: str) -> str:
    found = shutil.which(name) or (f"/usr/local/go/bin/{name}" if name == "go" and
                                   Path("/usr/local/go/bin/go").is_file() else None)
    if found is None:
        pytest.skip(f"{name} is not installed; install it with: {hint}")
    return found


def test_the_rust_sdk_is_a_crate_that_packages_offline(tmp_path: Path) -> None:
    cargo = _tool("cargo", "bash guest-sdks/rust/setup-toolchain.sh (as root)")
    crate = tmp_path / "rust"
    shutil.copytree(SDKS / "rust", crate, ignore=SKIP)
    proc = subprocess.run([cargo, "package", "--offline", "--allow-dirty"], cwd=crate,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "CARGO_TARGET_DIR": str(tmp_path / "target")})
    assert proc.returncode == 0, proc.stderr
    packaged = next((tmp_path / "target" / "package").glob("wasmext-*.crate"))
    assert packaged.stat().st_size > 10_000


def test_the_assemblyscript_sdk_is_a_public_npm_package(tmp_path: Path) -> None:
    npm = _tool("npm", "apt-get install nodejs npm")
    manifest = json.loads((SDKS / "assemblyscript" / "package.json").read_text())
    assert not manifest.get("private", False)
    package = tmp_path / "as"
    shutil.copytree(SDKS / "assemblyscript", package, ignore=SKIP)
    proc = subprocess.run([npm, "pack", "--json", "--pack-destination", str(tmp_path)],
                          cwd=package, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    files = {f["path"] for f in json.loads(proc.stdout)[0]["files"]}
    assert {"index.ts", "package.json", "assembly/plugin.ts", "README.md"} <= files
    assert (tmp_path / f"wasmext-as-sdk-{manifest['version']}.tgz").is_file()


@pytest.mark.parametrize("target", [{}, {"GOOS": "wasip1", "GOARCH": "wasm"}])
def test_the_go_sdk_is_a_module_that_vets(target: dict[str, str]) -> None:
    go = _tool("go", "bash guest-sdks/go/setup-toolchain.sh (as root)")
    module = (SDKS / "go" / "go.mod").read_text().splitlines()[0]
    assert module.startswith("module ") and "." in module.split()[1].split("/")[0]
    proc = subprocess.run([go, "vet", "./..."], cwd=SDKS / "go", capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod",
                               **target})
    assert proc.returncode == 0, proc.stderr
