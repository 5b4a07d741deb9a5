"""Build steps for `[build] lang = "rust"`: Debian's rustc, no cargo, no crates.

The guest SDK (guest-sdks/rust/src) is compiled once into an rlib for
wasm32-unknown-unknown and kept in a content-addressed cache
(~/.cache/wasmext-rust/<key>/libwasmext.rlib, the key covering the compiler,
the flags and every SDK source); the plugin's root source (`sources[0]`,
which may declare further modules of its folder) becomes a `cdylib` linked
against it. Both steps remap the source paths, so the same sources give the
same bytes from any checkout.

The compiler is the author's: `$WASMEXT_RUSTC` when set, else the `rustc` on
PATH (a rustup proxy honours `RUSTUP_TOOLCHAIN`) or beside the `cargo` on PATH,
when its sysroot has the standard library for wasm32-unknown-unknown. When it
has not, Debian's `/usr/bin/rustc` (with `libstd-rust-dev-wasm32`) builds
instead, and a failed compile says why in its error line; when no compiler has
the target (or the author chose one by `WASMEXT_RUSTC`/`RUSTUP_TOOLCHAIN`), the
error line names `rustup target add wasm32-unknown-unknown` and the Debian
package. The SDK compiles on Debian's 1.63 and on current stable.

`python -m wasmext_cli.build.rust --sdk-rlib ...` is the first step: it
builds the rlib into a temporary folder and moves it into the cache
atomically, so concurrent builds never see half a file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from wasmext.buildstamp import interpreter
from wasmext.manifest import BuildSpec
from wasmext_cli.build import ToolchainMissing, sdk_for, sdk_root

TARGET = "wasm32-unknown-unknown"
DEFAULT_RUSTC = "/usr/bin/rustc"
RUSTC_ENV = "WASMEXT_RUSTC"
CACHE_ENV = "WASMEXT_RUST_CACHE"
INSTALL_HINT = "apt-get update && apt-get install -y rustc libstd-rust-dev-wasm32"

# Shared by the SDK rlib and the plugin: both must agree on them.
CODEGEN = [
    "--edition", "2021", "--target", TARGET,
    "-C", "opt-level=2", "-C", "panic=abort", "-C", "codegen-units=1",
    "-C", "debuginfo=0",
    # memory.copy/memory.fill instead of byte loops (wasmtime enables bulk
    # memory by default; fuel then counts one unit per byte copied).
    "-C", "target-feature=+bulk-memory",
]
# Only for the final module: whole-program optimisation with the standard
# library (about 15% smaller and a little less fuel per call), and no names or
# debug sections.
LINK = ["-C", "lto=fat", "-C", "strip=symbols"]


TOOLCHAIN_ENV = "RUSTUP_TOOLCHAIN"
RUSTUP_HINT = f"rustup target add {TARGET}"
DEBIAN_HINT = "apt-get install rustc libstd-rust-dev-wasm32"


@dataclass(frozen=True)
class Rustc:
    """A compiler that can build for wasm32, and why it is not the author's own, if so."""

    exe: str
    version: str
    note: str = ""


@dataclass(frozen=True)
class _Probe:
    exe: str
    version: str  # "" when it does not run
    sysroot: str
    has_target: bool


def _probe(exe: str) -> _Probe:
    """What `exe --version` and `exe --print sysroot` say, and whether the sysroot has
    the wasm32 standard library."""
    try:
        version = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                 check=True, timeout=60).stdout.strip()
        sysroot = subprocess.run([exe, "--print", "sysroot"], capture_output=True, text=True,
                                 check=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return _Probe(exe, "", "", False)
    std = Path(sysroot) / "lib" / "rustlib" / TARGET / "lib"
    has_target = bool(sysroot) and any(std.glob("libstd-*.rlib"))
    return _Probe(exe, version or "rustc", sysroot, has_target)


def _authors_rustc() -> list[str]:
    """The compilers an author would build with, theirs first: the `rustc` on PATH, the
    one beside the `cargo` on PATH."""
    found: list[str] = []
    rustc_on_path = shutil.which("rustc")
    if rustc_on_path:
        found.append(rustc_on_path)
    cargo = shutil.which("cargo")
    if cargo and (Path(cargo).parent / "rustc").is_file():
        found.append(str(Path(cargo).parent / "rustc"))
    return list(dict.fromkeys(found))


def _lacks_target(probe: _Probe, hint_toolchain: str = "") -> str:
    add = f"{RUSTUP_HINT} --toolchain {hint_toolchain}" if hint_toolchain else RUSTUP_HINT
    return (f"{probe.exe} ({probe.version}) has no standard library for {TARGET}; "
            f"add it with: {add}   (or, with Debian's rustc: {DEBIAN_HINT})")


def _with_linker(chosen: Rustc, sysroot: str) -> Rustc:
    """`chosen` when rust-lld, the wasm linker, is where rustc looks for it."""
    search = os.pathsep.join([str(Path(chosen.exe).parent), os.environ.get("PATH", "")])
    if shutil.which("rust-lld", path=search) is not None:
        return chosen
    if any((Path(sysroot) / "lib" / "rustlib").glob("*/bin/rust-lld")):  # rustup ships it
        return chosen
    raise ToolchainMissing(f"the wasm linker rust-lld (package lld) is missing; "
                           f"install it with: {INSTALL_HINT}")


def select_rustc() -> Rustc:
    """The compiler a Rust plugin builds with (see the module docstring); ToolchainMissing
    naming the command that adds the wasm32 target when none has it."""
    named = os.environ.get(RUSTC_ENV)
    if named:
        if not Path(named).is_file():
            raise ToolchainMissing(f"{RUSTC_ENV}={named} is not a file; install Rust with: "
                                   f"{INSTALL_HINT}")
        probe = _probe(named)
        if not probe.version:
            raise ToolchainMissing(f"{RUSTC_ENV}={named} does not run; install Rust with: "
                                   f"{INSTALL_HINT}")
        if not probe.has_target:
            raise ToolchainMissing(_lacks_target(probe))
        return _with_linker(Rustc(named, probe.version), probe.sysroot)
    probes = [p for p in map(_probe, _authors_rustc()) if p.version]
    chosen = next((p for p in probes if p.has_target), None)
    if chosen is not None:
        return _with_linker(Rustc(chosen.exe, chosen.version), chosen.sysroot)
    toolchain = os.environ.get(TOOLCHAIN_ENV, "")
    if probes and toolchain:  # the author chose it: no other compiler instead
        raise ToolchainMissing(_lacks_target(probes[0], toolchain))
    debian = _probe(DEFAULT_RUSTC) if Path(DEFAULT_RUSTC).is_file() else None
    if debian is not None and debian.has_target:
        note = ""
        if probes:
            first = probes[0]
            note = (f"built with {DEFAULT_RUSTC} ({debian.version}) because {first.exe} "
                    f"({first.version}) has no standard library for {TARGET}; to build with "
                    f"it: {RUSTUP_HINT}")
        return _with_linker(Rustc(DEFAULT_RUSTC, debian.version, note), debian.sysroot)
    if probes:
        raise ToolchainMissing(_lacks_target(probes[0]))
    if debian is not None and debian.version:
        raise ToolchainMissing(_lacks_target(debian))
    raise ToolchainMissing(f"the Rust toolchain is missing (no rustc on PATH, no "
                           f"{DEFAULT_RUSTC}); install it with: rustup target add {TARGET} "
                           f"after https://rustup.rs, or: {INSTALL_HINT}")


def rustc() -> str:
    """The rustc to use; ToolchainMissing with the install command if unusable."""
    return select_rustc().exe


def failure_note() -> str:
    """Why a failed compile may not be the author's compiler: "" when it was theirs."""
    try:
        return select_rustc().note
    except ToolchainMissing:
        return ""


def sdk_dir() -> Path:
    """The Rust SDK folder."""
    return sdk_root() / "rust"


def rlib_command(exe: str, sdk: Path, out: Path) -> list[str]:
    """rustc arguments that compile the SDK crate into `out`."""
    return [
        exe, *CODEGEN, "--crate-type", "rlib", "--crate-name", "wasmext",
        "--remap-path-prefix", f"{sdk}=wasmext",
        "-o", str(out), str(sdk / "src" / "lib.rs"),
    ]


def _cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wasmext-rust"


def rlib_path(exe: str, sdk: Path) -> Path:
    """Where the SDK rlib for this compiler, these flags and these sources lives."""
    digest = hashlib.sha256()
    version = subprocess.run([exe, "-vV"], capture_output=True, text=True, timeout=60).stdout
    digest.update(version.encode())
    digest.update(repr(rlib_command("rustc", Path("sdk"), Path("out"))).encode())
    for src in sorted((sdk / "src").rglob("*.rs")):
        digest.update(src.relative_to(sdk).as_posix().encode() + b"\0")
        digest.update(src.read_bytes() + b"\0")
    return _cache_root() / digest.hexdigest()[:24] / "libwasmext.rlib"


def crate_name(source: str) -> str:
    """A valid crate name from the root source's file name."""
    stem = "".join(c if c.isalnum() or c == "_" else "_" for c in Path(source).stem)
    return stem if stem and not stem[0].isdigit() else f"plugin_{stem}"


def plugin_command(exe: str, spec: BuildSpec, plugin_dir: Path, rlib: Path,
                   out: Path) -> list[str]:
    """The rustc command building a plugin against the SDK rlib."""
    root = spec.sources[0]
    return [
        exe, *CODEGEN, *LINK, "--crate-type", "cdylib", "--crate-name", crate_name(root),
        "--extern", f"wasmext={rlib}",
        "--remap-path-prefix", f"{plugin_dir}=.",
        "-o", str(out), root,
    ]


def commands(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[list[str]]:
    """The SDK rlib (cached), then the plugin module written to `out`."""
    exe = rustc()
    sdk = sdk_for("rust", plugin_dir)
    rlib = rlib_path(exe, sdk)
    step_sdk = [interpreter(), "-m", "wasmext_cli.build.rust", "--sdk-rlib", str(rlib),
                "--rustc", exe, "--sdk", str(sdk)]
    return [step_sdk, plugin_command(exe, spec, plugin_dir, rlib, out)]


def build_sdk_rlib(dest: Path, exe: str, sdk: Path) -> int:
    """Compile the SDK into `dest` unless it is there; atomic for concurrent builds."""
    if dest.is_file():
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=dest.parent))
    try:
        # cwd = the SDK, whose path is remapped: rustc records its working dir.
        proc = subprocess.run(rlib_command(exe, sdk, tmp / dest.name), cwd=sdk,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr or proc.stdout)
            return proc.returncode
        os.replace(tmp / dest.name, dest)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Command line building the Rust SDK rlib; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m wasmext_cli.build.rust",
                                     description="Build the Rust guest SDK rlib into the cache.")
    parser.add_argument("--sdk-rlib", type=Path, required=True, help="the rlib to produce")
    parser.add_argument("--rustc", default=DEFAULT_RUSTC)
    parser.add_argument("--sdk", type=Path, default=None, help="guest-sdks/rust")
    args = parser.parse_args(argv)
    return build_sdk_rlib(args.sdk_rlib, args.rustc, args.sdk or sdk_dir())


if __name__ == "__main__":
    raise SystemExit(main())
