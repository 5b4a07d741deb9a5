"""Is a plugin's .wasm up to date? A fingerprint of everything its build reads.

`wasmext build` skips a folder whose output was built from exactly what is
there now: the build commands, every file of the plugin folder (less build
output and dependency folders: their lock files count instead; less hidden
folders and the author's test files, which no toolchain reads), the SDK it
builds against, the toolchain packages' versions and this wasmext's version.
The fingerprint and the output's SHA-256 are kept in a hidden stamp beside the
output; an output replaced or removed since, or any input changed, means a
build. Like make, but by content rather than by modification time, so a fresh
checkout or a copied folder never looks newer or older than it is.

The fingerprint covers the build's commands, and working them out may start
the toolchain (which rustc has the wasm32 target, which go): a no-change build
first tries the stamp's `quick` fingerprint, the same files and versions plus
the environment that picks a toolchain and the identity (size, mtime) of every
program the recorded commands run; only when that differs are the commands
worked out and the whole fingerprint compared; both digest one reading of the
files (`input_files`), so a build reads each input once before it runs the
toolchain and once after (a step may write inputs). A toolchain that changes in a way
neither sees (a target added to a rustup toolchain that was not the one used)
is picked up at the next change of an input, or by `wasmext build --force`.

Built modules are also kept by that fingerprint (`kept_output`, `keep_output`:
the newest few under the user's cache folder), and a build whose inputs have a
kept module takes it instead of running the toolchain: the same inputs give the
same bytes, so the host's compile cache (keyed by those bytes) finds code it
compiled before. That is what makes Python components reproducible at all:
componentize-py runs CPython at build time to pre-initialise it, with a hash
seed, clocks and randomness from the host that no option or variable of it fixes
(its init guest's environment is three fixed variables), so two runs on the
same sources snapshot different heaps.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from wasmext.files import atomic_write

__all__ = ["InputFiles", "fingerprint", "input_files", "interpreter", "is_fresh",
           "is_quick_fresh", "keep_output", "kept_output", "outputs_dir", "quick_fingerprint",
           "sources_changed", "stamp_path", "still_fresh", "write_stamp"]

# Build output and fetched dependencies: regenerated, and read through their lock files.
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "target", "zig-cache", "zig-out",
                          "build", "dist"})
# The author's tests, which no toolchain reads (go build leaves out *_test.go itself): an edit
# of a test, or pytest's cache after a failed one, was a new build of the plugin.
TEST_FILES = ("test_*.py", "*_test.py", "conftest.py", "*_test.go")
TOOL_PACKAGES = ("ziglang", "componentize-py", "wasmext")
MAX_FILES = 20_000  # a folder this big is not a plugin's sources: build without a stamp
KEPT_OUTPUTS = 24  # a Python component is ~18 MiB: the newest few edits' worth
OUTPUTS_ENV = "WASMEXT_BUILD_OUTPUTS"
# The environment that picks a toolchain or where its caches are: the builders read these.
TOOLCHAIN_ENV = ("PATH", "HOME", "XDG_CACHE_HOME")
TOOLCHAIN_ENV_PREFIXES = ("WASMEXT_", "RUSTUP_", "CARGO_", "GO")


@functools.cache
def interpreter() -> str:
    """This Python as one path per environment: what build commands run and fingerprints
    hold. A venv's `python` and `python3` are one interpreter, but `wasmext` (the console
    script) runs as `python3` and `python -m pytest` as `python`; by sys.executable each
    found the other's build stale."""
    exe = Path(sys.executable)
    real = os.path.realpath(exe)
    for name in ("python3", "python", f"python{sys.version_info[0]}.{sys.version_info[1]}"):
        candidate = exe.with_name(name)
        if os.path.realpath(candidate) == real:
            return str(candidate)
    return sys.executable


def stamp_path(out: Path) -> Path:
    """The stamp file beside a built module."""
    return out.with_name(f".{out.name}.stamp")


def _other_plugin(folder: Path, own: Path) -> bool:
    """A folder below a build root that is a plugin of its own (an SDK's examples and
    conformance plugin): neither its sources nor its outputs are this build's inputs."""
    return (folder / "plugin.toml").is_file() and folder != own and folder not in own.parents


def _files(root: Path, skip: set[Path], own: Path) -> Iterator[Path]:
    for folder, dirs, names in os.walk(root):
        # A hidden folder is a tool's (.git, .venv, .zig-cache, .pytest_cache, .mypy_cache,
        # an editor's): no build reads one, and the tools write them as they please.
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")
                         and not _other_plugin(Path(folder) / d, own))
        for name in sorted(names):
            path = Path(folder) / name
            if path in skip or name.endswith((".wasm.tmp", ".stamp")) or ".tmp-" in name \
                    or any(fnmatch.fnmatchcase(name, pattern) for pattern in TEST_FILES):
                continue
            yield path


def _versions() -> dict[str, str]:
    from importlib import metadata  # a full fingerprint's, not every command's

    found = {}
    for name in TOOL_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


class InputFiles:
    """The build's input files, each read and hashed once: what `fingerprint` and
    `quick_fingerprint` of one moment both digest (`entries` None: too many to tell)."""

    __slots__ = ("entries",)

    def __init__(self, entries: list[bytes] | None) -> None:
        self.entries = entries


def _hash_file(path: Path) -> bytes:
    try:
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return b"<unreadable>"


def input_files(roots: Iterable[Path], out: Path) -> InputFiles:
    """Read and hash every input file under `roots` once (the first root is the plugin's
    own folder); no entries when there are more than MAX_FILES."""
    roots = list(roots)
    entries: list[bytes] = []
    for root in roots:
        for path in _files(root, {out, stamp_path(out)}, roots[0]):
            if len(entries) >= MAX_FILES:
                return InputFiles(None)
            entries.append(f"\0{path.relative_to(root)}\0".encode() + _hash_file(path))
    return InputFiles(entries)


def fingerprint(roots: Iterable[Path], steps: list[list[str]], out: Path, tmp: Path,
                files: InputFiles | None = None) -> str | None:
    """The SHA-256 of what the build reads, or None when it cannot be told (too many files).

    The first root is the plugin's own folder; other plugins found below a root (an
    SDK's examples) are left out, so building one never makes another stale. `files`
    (from `input_files`, taken at the same moment) saves reading them again."""
    placeholder = [[arg.replace(str(tmp), "<out>") for arg in cmd] for cmd in steps]
    return _digest(roots, out, [placeholder, _versions(), sys.version], files)


def _toolchain_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items())
            if k in TOOLCHAIN_ENV or k.startswith(TOOLCHAIN_ENV_PREFIXES)}


def quick_fingerprint(roots: Iterable[Path], out: Path,
                      files: InputFiles | None = None) -> str | None:
    """The files and versions of `fingerprint`, with the interpreter, the roots and the
    environment that picks a toolchain instead of the commands: computed without
    starting any toolchain (and, given `files`, without reading them again)."""
    roots = list(roots)
    return _digest(roots, out, [[str(r) for r in roots], _versions(), sys.version,
                                interpreter(), _toolchain_env()], files)


def _digest(roots: Iterable[Path], out: Path, head: object,
            files: InputFiles | None) -> str | None:
    entries = (files if files is not None else input_files(roots, out)).entries
    if entries is None:
        return None
    digest = hashlib.sha256()
    digest.update(json.dumps(head).encode())
    for entry in entries:
        digest.update(entry)
    return digest.hexdigest()


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _stamp(out: Path) -> dict[str, Any]:
    try:
        stamp = json.loads(stamp_path(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return stamp if isinstance(stamp, dict) else {}


def is_fresh(out: Path, print_: str | None) -> bool:
    """Was `out` built from inputs with this fingerprint, and is it still that output?"""
    if print_ is None:
        return False
    stamp = _stamp(out)
    return stamp.get("inputs") == print_ and stamp.get("output") == _sha256(out)


def _program(arg: str) -> str | None:
    """`arg` when it names a program file by its absolute path (a compiler, an interpreter)."""
    return arg if os.path.isabs(arg) and os.path.isfile(arg) and os.access(arg, os.X_OK) \
        else None


def _programs(steps: list[list[str]]) -> dict[str, list[int]]:
    """Each program the commands name by path, with its size and modification time."""
    found: dict[str, list[int]] = {}
    for cmd in steps:
        for arg in cmd:
            path = _program(arg)
            if path is not None and path not in found:
                st = os.stat(path)
                found[path] = [st.st_size, st.st_mtime_ns]
    return found


def is_quick_fresh(out: Path, quick: str | None) -> bool:
    """Is `out` fresh by the stamp's quick fingerprint: the same files, versions and
    toolchain environment, every program its commands ran unchanged, the same output?"""
    stamp = _stamp(out)
    programs = stamp.get("programs")
    if quick is None or stamp.get("quick") != quick or not isinstance(programs, dict):
        return False
    for path, identity in programs.items():
        try:
            st = os.stat(path)
        except OSError:
            return False
        if [st.st_size, st.st_mtime_ns] != identity:
            return False
    return stamp.get("output") == _sha256(out)


def write_stamp(out: Path, print_: str | None, quick: str | None = None,
                steps: list[list[str]] | None = None,
                roots: Iterable[Path] | None = None,
                files: InputFiles | None = None) -> None:
    """Record the inputs' fingerprint and the output's digest (nothing when print_ is None);
    with `quick`, the `steps` that built it and the `roots` it read, also what
    `is_quick_fresh` and `still_fresh` compare; with the `files` read, what
    `sources_changed` compares."""
    if print_ is None:
        return
    stamp: dict[str, Any] = {"inputs": print_, "output": _sha256(out)}
    if quick is not None and steps is not None and roots is not None:
        stamp.update(quick=quick, programs=_programs(steps), roots=[str(r) for r in roots])
        sources = _digest([], out, None, files) if files is not None else None
        if sources is not None:
            stamp["sources"] = sources
    atomic_write(stamp_path(out), json.dumps(stamp))


def sources_changed(out: Path) -> bool:
    """Are the files `out` was built from (its plugin folder's and its SDK's) no longer
    what they were? Only the files, not the toolchain or its environment: what a command
    running the module warns of. False when the stamp cannot tell (none, an older one)."""
    stamp = _stamp(out)
    roots, sources = stamp.get("roots"), stamp.get("sources")
    if not isinstance(roots, list) or not roots or not isinstance(sources, str) \
            or not all(isinstance(r, str) for r in roots) or stamp.get("output") != _sha256(out):
        return False
    now = _digest([], out, None, input_files([Path(r) for r in roots], out))
    return now is not None and now != sources


def still_fresh(out: Path) -> bool:
    """Is `out` up to date by its stamp's quick fingerprint, over the folders the stamp
    names? What `wasmext build` would find first, told without the build (or a process)."""
    roots = _stamp(out).get("roots")
    if not isinstance(roots, list) or not roots or not all(isinstance(r, str) for r in roots):
        return False
    return is_quick_fresh(out, quick_fingerprint([Path(r) for r in roots], out))


def outputs_dir() -> Path:
    """Where built modules are kept by fingerprint: $WASMEXT_BUILD_OUTPUTS, else
    XDG_CACHE_HOME (or ~/.cache)/wasmext/builds."""
    chosen = os.environ.get(OUTPUTS_ENV)
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wasmext" / "builds"


def _kept_path(print_: str) -> Path:
    return outputs_dir() / f"{print_}.wasm"


def kept_output(print_: str | None) -> bytes | None:
    """The module built before from inputs with this fingerprint, if it is still kept."""
    if print_ is None:
        return None
    path = _kept_path(print_)
    try:
        data = path.read_bytes()
        os.utime(path)  # used: the newest are the ones kept
    except OSError:
        return None
    return data if data.startswith(b"\0asm") else None


def keep_output(out: Path, print_: str | None) -> None:
    """Keep the module `out` under its inputs' fingerprint, and only the newest
    KEPT_OUTPUTS modules; a full or read-only disk only loses the shortcut."""
    if print_ is None:
        return
    folder = outputs_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(_kept_path(print_), out.read_bytes())
        kept = sorted(folder.glob("*.wasm"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in kept[KEPT_OUTPUTS:]:
            old.unlink(missing_ok=True)
    except OSError:
        return
