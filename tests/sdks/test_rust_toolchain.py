"""Which rustc builds a Rust plugin: the author's when it has the wasm32 standard library,
Debian's when only that one has it, and an error line naming `rustup target add` when
none has it. The toolchains are fake `rustc` scripts answering `--version` and
`--print sysroot` as a real one does, with or without lib/rustlib/wasm32-unknown-unknown;
the build runs through one wrapping the real compiler that has the target."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wasmext_cli.build import ToolchainMissing
from wasmext_cli.build import rust as build_rust

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "guest-sdks" / "rust" / "examples" / "hello"
TARGET = "wasm32-unknown-unknown"
RUSTUP_ADD = "rustup target add wasm32-unknown-unknown"


def fake_rustc(folder: Path, version: str, with_target: bool) -> Path:
    """A `rustc` in `folder/bin` whose sysroot is `folder/sysroot`."""
    sysroot = folder / "sysroot"
    (sysroot / "lib" / "rustlib" / "x86_64-unknown-linux-gnu" / "bin").mkdir(parents=True)
    (sysroot / "lib" / "rustlib" / "x86_64-unknown-linux-gnu" / "bin" / "rust-lld").touch()
    if with_target:
        std = sysroot / "lib" / "rustlib" / TARGET / "lib"
        std.mkdir(parents=True)
        (std / "libstd-0123456789abcdef.rlib").write_bytes(b"!<arch>\n")
    exe = folder / "bin" / "rustc"
    exe.parent.mkdir(parents=True)
    exe.write_text(f"""#!/bin/sh
case "$1" in
  --version) echo "rustc {version}" ;;
  -vV) printf 'rustc {version}\\nhost: x86_64-unknown-linux-gnu\\n' ;;
  --print) echo "{sysroot}" ;;
  *) echo "error: this fake rustc compiles nothing" >&2; exit 1 ;;
esac
""")
    exe.chmod(0o755)
    return exe


@pytest.fixture
def toolchains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An author's rustc with the target, one without, and a Debian one with it; PATH holds
    none of them until a test puts one there."""
    made = {
        "with": fake_rustc(tmp_path / "stable", "1.95.0 (fake 2026-04-14)", True),
        "without": fake_rustc(tmp_path / "nightly", "1.96.0-nightly (fake)", False),
        "debian": fake_rustc(tmp_path / "debian", "1.63.0", True),
        "debian-bare": fake_rustc(tmp_path / "debian-bare", "1.63.0", False),
    }
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("WASMEXT_RUSTC", raising=False)
    monkeypatch.delenv("RUSTUP_TOOLCHAIN", raising=False)
    monkeypatch.setattr(build_rust, "DEFAULT_RUSTC", str(made["debian"]))
    return made


def on_path(monkeypatch: pytest.MonkeyPatch, *exes: Path) -> None:
    monkeypatch.setenv("PATH", os.pathsep.join(str(e.parent) for e in exes))


def test_the_authors_rustc_with_the_target_is_used(toolchains: dict[str, Path],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    on_path(monkeypatch, toolchains["with"])
    chosen = build_rust.select_rustc()
    assert chosen.exe == str(toolchains["with"]) and chosen.note == ""
    assert chosen.version == "rustc 1.95.0 (fake 2026-04-14)"


def test_without_the_target_debians_rustc_builds_and_the_note_says_how_to_add_it(
        toolchains: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    on_path(monkeypatch, toolchains["without"])
    chosen = build_rust.select_rustc()
    assert chosen.exe == str(toolchains["debian"])
    assert str(toolchains["without"]) in chosen.note and RUSTUP_ADD in chosen.note
    assert build_rust.failure_note() == chosen.note


def test_a_toolchain_named_by_rustup_toolchain_without_the_target_is_an_error(
        toolchains: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    on_path(monkeypatch, toolchains["without"])
    monkeypatch.setenv("RUSTUP_TOOLCHAIN", "nightly")
    with pytest.raises(ToolchainMissing) as err:
        build_rust.select_rustc()
    line = str(err.value)
    assert "\n" not in line and f"{RUSTUP_ADD} --toolchain nightly" in line
    assert "libstd-rust-dev-wasm32" in line and "1.96.0-nightly" in line


def test_no_compiler_with_the_target_names_rustup_and_debian(
        toolchains: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_rust, "DEFAULT_RUSTC", str(toolchains["debian-bare"]))
    on_path(monkeypatch, toolchains["without"])
    with pytest.raises(ToolchainMissing) as err:
        build_rust.select_rustc()
    line = str(err.value)
    assert str(toolchains["without"]) in line and RUSTUP_ADD in line
    assert "apt-get install rustc libstd-rust-dev-wasm32" in line
    monkeypatch.setenv("PATH", str(toolchains["without"].parent.parent / "nowhere"))
    with pytest.raises(ToolchainMissing) as err:  # only Debian's, without the target
        build_rust.select_rustc()
    assert str(toolchains["debian-bare"]) in str(err.value) and RUSTUP_ADD in str(err.value)


def test_wasmext_rustc_wins_and_is_held_to_the_target(
        toolchains: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    on_path(monkeypatch, toolchains["with"])
    monkeypatch.setenv("WASMEXT_RUSTC", str(toolchains["debian"]))
    assert build_rust.select_rustc().exe == str(toolchains["debian"])
    monkeypatch.setenv("WASMEXT_RUSTC", str(toolchains["without"]))
    with pytest.raises(ToolchainMissing) as err:  # named on purpose: no other instead
        build_rust.select_rustc()
    assert RUSTUP_ADD in str(err.value)


def test_a_rustc_that_does_not_run_is_passed_over(
        toolchains: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    broken = tmp_path / "broken" / "rustc"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    on_path(monkeypatch, broken)
    assert build_rust.select_rustc().exe == str(toolchains["debian"])


# --- a real build, through a wrapper of the real compiler that has the target

def _real_rustc_with_target() -> Path:
    real = Path("/usr/bin/rustc")
    if not real.is_file():
        pytest.skip("no rustc with the wasm32 target (apt-get install rustc "
                    "libstd-rust-dev-wasm32)")
    probe = build_rust._probe(str(real))
    if not probe.has_target:
        pytest.skip(f"{real} has no wasm32 standard library (libstd-rust-dev-wasm32)")
    return real


def cli(*args: str, cwd: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    env.pop("WASMEXT_RUSTC", None)
    env.pop("RUSTUP_TOOLCHAIN", None)
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_build_runs_the_authors_compiler(tmp_path: Path) -> None:
    real = _real_rustc_with_target()
    wrapper = tmp_path / "author-bin" / "rustc"
    wrapper.parent.mkdir()
    calls = tmp_path / "calls.txt"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    folder = tmp_path / "hello"
    shutil.copytree(HELLO, folder, ignore=shutil.ignore_patterns("*.wasm", "*.stamp"))
    path = os.pathsep.join([str(wrapper.parent), os.environ.get("PATH", "")])
    proc = cli("build", "--force", str(folder), cwd=tmp_path, path=path)
    assert proc.returncode == 0, proc.stderr
    assert (folder / "hello.wasm").read_bytes()[:4] == b"\0asm"
    assert "--crate-type cdylib" in calls.read_text()  # the plugin compiled through it


def test_current_rust_on_debians_rustc_fails_with_the_reason_in_the_error_line(
        tmp_path: Path) -> None:
    _real_rustc_with_target()
    author = fake_rustc(tmp_path / "stable", "1.95.0 (fake)", False)
    folder = tmp_path / "hello"
    shutil.copytree(HELLO, folder, ignore=shutil.ignore_patterns("*.wasm", "*.stamp"))
    source = folder / "hello.rs"
    # `let ... else` (Rust 1.65): what an author on current stable writes.
    source.write_text(source.read_text().replace(
        "        let name = call.data_str()?;",
        "        let Ok(name) = call.data_str() else {\n"
        "            return Err(wasmext::Error::new(code::INVALID, \"not a string\"));\n"
        "        };"))
    path = os.pathsep.join([str(author.parent), os.environ.get("PATH", "")])
    proc = cli("build", str(folder), cwd=tmp_path, path=path)
    assert proc.returncode == 1
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith("wasmext: plugin hello: building hello.rs failed: hello.rs:")
    assert "`let...else` statements are unstable" in err
    assert f"because {author} (rustc 1.95.0 (fake)) has no standard library" in err
    assert RUSTUP_ADD in err
