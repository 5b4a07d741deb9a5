"""Build a plugin folder into its .wasm with the toolchain its manifest names.

C and Zig compile with the `ziglang` package (`pip install wasmext[build]`);
the other languages' builders are named in languages.py. The SDKs come from
the project's vendored ./wasmext-sdk, else $WASMEXT_SDK_DIR, else the copy
the wheel carries (importlib.resources), else the checkout.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext.buildstamp import (
    fingerprint,
    input_files,
    interpreter,
    is_fresh,
    is_quick_fresh,
    keep_output,
    kept_output,
    quick_fingerprint,
    write_stamp,
)
from wasmext.errors import WasmextError
from wasmext.files import atomic_write, durable_replace
from wasmext.manifest import BuildSpec, load_folder
from wasmext_cli.build.errors import first_error
from wasmext_cli.languages import LANGUAGES as REGISTRY

if TYPE_CHECKING:
    from wasmext import Runtime

SDK_ENV = "WASMEXT_SDK_DIR"
ZIG_INSTALL_HINT = "pip install 'wasmext[build]'   (installs the ziglang toolchain)"


class BuildError(Exception):
    """A plugin could not be built; the message (one line) says why and what to do."""

    detail: str = ""  # the compiler's whole output, for --verbose


class ToolchainMissing(BuildError):
    """The language's toolchain is not installed; the message has the install command."""


@dataclass(frozen=True)
class BuildResult:
    """A built plugin: its folder, module, command and whether it was up to date."""

    plugin_dir: Path
    wasm: Path
    command: tuple[str, ...]  # its last step; () when it was up to date by the quick stamp
    up_to_date: bool = False  # nothing it reads changed since it was built: not run again
    kept: bool = False  # written from the module built from these inputs before (buildstamp)
    compiled: bool = False  # its code went into the host's compile cache just now
    warning: str = ""  # built, but the host would refuse to load it: why


def sdk_root() -> Path:
    """Where the guest SDKs live: $WASMEXT_SDK_DIR (an override), else the copy the wheel
    carries as package data, else the source checkout this module runs from."""
    env = os.environ.get(SDK_ENV)
    if env:
        return Path(env)
    shipped = Path(str(resources.files("wasmext_cli") / "_data" / "guest-sdks"))
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[3] / "guest-sdks"


VENDORED_SDK = "wasmext-sdk"


def sdk_for(lang: str, plugin_dir: Path | None = None) -> Path:
    """The SDK a plugin builds against: the copy its project vendors (`wasmext new` puts one
    in ./wasmext-sdk) when there is one, else the installed SDK of `lang`."""
    if plugin_dir is not None and (plugin_dir / VENDORED_SDK).is_dir():
        return plugin_dir / VENDORED_SDK
    return sdk_root() / lang


def _zig() -> list[str]:
    try:
        import ziglang  # noqa: F401
    except ImportError as exc:
        raise ToolchainMissing(
            f"the zig toolchain is missing; install it with: {ZIG_INSTALL_HINT}") from exc
    return [interpreter(), "-m", "ziglang"]


def c_command(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[str]:
    """The zig cc command building a C plugin with the C SDK."""
    sdk = sdk_for("c", plugin_dir)
    sdk_sources = sorted(str(p) for p in (sdk / "src").glob("*.c"))
    return [
        *_zig(), "cc", "--target=wasm32-wasi", "-mexec-model=reactor",
        "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror",
        "-ffile-prefix-map=" + str(plugin_dir) + "=.",
        "-ffile-prefix-map=" + str(sdk) + "=sdk",
        "-I", str(sdk / "include"),
        *(f"-I{plugin_dir / inc}" for inc in spec.include),
        *(str(plugin_dir / s) for s in spec.sources),
        *sdk_sources,
        "-Wl,--strip-all",
        "-o", str(out),
    ]


def zig_command(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[str]:
    """The zig build-exe command building a Zig plugin with the Zig SDK."""
    sdk = sdk_for("zig", plugin_dir) / "src" / "wasmext.zig"
    root = plugin_dir / spec.sources[0]
    return [
        *_zig(), "build-exe", "-target", "wasm32-wasi", "-fno-entry", "-rdynamic",
        "-O", "ReleaseSmall", "-fstrip",
        "--dep", "wasmext", f"-Mroot={root}", f"-Mwasmext={sdk}",
        f"-femit-bin={out}",
    ]


# A language's build: the commands to run in order (the last writes `out`).
StepsFn = Callable[[BuildSpec, Path, Path], list[list[str]]]


def c_steps(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[list[str]]:
    """The steps building a C plugin."""
    return [c_command(spec, plugin_dir, out)]


def zig_steps(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[list[str]]:
    """The steps building a Zig plugin."""
    return [zig_command(spec, plugin_dir, out)]


# Every language, its builder and its scaffold: the table in languages.py.
LANGUAGES = tuple(REGISTRY)


def resolve(ref: str) -> Any:
    """"module:attribute" from the language table, imported on first use."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def commands_for(lang: str) -> StepsFn | None:
    """The function building a language's steps, or None for an unknown language."""
    entry = REGISTRY.get(lang)
    if entry is None:
        return None
    fn: StepsFn = resolve(entry.builder)
    return fn


Progress = Callable[[str], None]


def _step_name(cmd: list[str]) -> str:
    """What a step runs, for the progress line: the tool, not the interpreter or `env`."""
    args = [a for a in cmd if "=" not in a or a.startswith("-")] if cmd[0] == "env" else cmd
    if Path(args[0]).name == "env":
        args = args[1:]
    if args[0] == interpreter() and len(args) > 2 and args[1] == "-m":
        return " ".join(args[2:4]).removeprefix("wasmext_cli.")
    return " ".join([Path(args[0]).name, *args[1:2]])


def _inputs(lang: str, plugin_dir: Path) -> list[Path]:
    """The folders a build reads: the plugin's, and the SDK's unless the plugin vendors it."""
    sdk = REGISTRY[lang].sdk
    if sdk is None or (plugin_dir / VENDORED_SDK).is_dir():
        return [plugin_dir]
    return [plugin_dir, sdk_for(sdk, plugin_dir)]


def _failure_note(lang: str) -> str:
    """What the language's builder adds to a failed compile (why its compiler was not the
    author's own, say): its module's `failure_note()`, as "; note", or ""."""
    module = importlib.import_module(REGISTRY[lang].builder.partition(":")[0])
    note: Callable[[], str] | None = getattr(module, "failure_note", None)
    text = note() if note is not None else ""
    return f"; {text}" if text else ""


# Languages whose modules the host runs through another loader, with no compile cache.
UNCACHED_LANGUAGES = frozenset({"extism-assemblyscript"})


def build_plugin(plugin_dir: Path, out_dir: Path | None = None,
                 progress: Progress | None = None, verbose: Progress | None = None,
                 force: bool = False, runtime: Runtime | None = None) -> BuildResult:
    """Build the plugin in `plugin_dir`; the .wasm lands beside plugin.toml.

    `progress` hears one short line before each step; `verbose` each command and the
    compiler's full output. A failed step raises BuildError whose message is one line
    (plugin, step, the compiler's first error) and whose `detail` is the whole output.
    An output built from the same inputs is kept (`up_to_date`) unless `force`.
    With a `runtime`, the output's compiled code goes into its compile cache (when not
    there already), so the first load after the build does not compile.
    """
    result = _build(plugin_dir, out_dir, progress, verbose, force)
    if runtime is None or result.lang in UNCACHED_LANGUAGES:
        return result.built
    wasm = result.built.wasm
    say = progress or (lambda _line: None)
    try:
        compiled = runtime.precompile(
            wasm.read_bytes(), name=str(wasm),
            announce=lambda: say(f"{result.plugin_id}: compiling {wasm.name} for the host"))
    except WasmextError as exc:
        return replace(result.built, warning=f"plugin {result.plugin_id}: built {wasm}, but "
                                             f"the host refuses it: {exc.describe()}")
    return replace(result.built, compiled=compiled)


@contextlib.contextmanager
def _output_lock(out: Path) -> Iterator[None]:
    """Hold the lock of the output `out`: a hidden file beside it (named like the build's
    own temporary files, so that no fingerprint counts it) that lives only while a build
    holds it.

    The holder removes the file before letting go; a build that opened it meanwhile then
    holds a lock on a file no longer there, sees that the path is not (or is another)
    file, and starts over on the path's current file: one builder at a time, and no
    lock file left beside the plugin's outputs."""
    path = out.with_name(f".{out.name}.tmp-lock")
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                now = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
        except BaseException:
            os.close(fd)
            raise
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # the holder before us removed it: take the one there now
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # still holding the lock: nobody can be inside with another file
        os.close(fd)


@dataclass(frozen=True)
class _Built:
    built: BuildResult
    plugin_id: str
    lang: str


def _build(plugin_dir: Path, out_dir: Path | None, progress: Progress | None,
           verbose: Progress | None, force: bool) -> _Built:
    manifest = load_folder(plugin_dir)  # the folder rules, before resolving any symlink
    plugin_dir = plugin_dir.resolve()
    spec = manifest.build
    where = plugin_dir / "plugin.toml"
    if spec is None:
        raise BuildError(f"plugin {manifest.id}: {where}: no [build] table")
    make_steps = commands_for(spec.lang)
    if make_steps is None:
        raise BuildError(f"plugin {manifest.id}: {where}: build.lang {spec.lang!r} is not one "
                         f"of {', '.join(LANGUAGES)}")
    for source in spec.sources:
        if not (plugin_dir / source).is_file():
            raise BuildError(f"plugin {manifest.id}: {where}: build.sources names {source!r}, "
                             "which is not a file in the plugin folder")
    out = (out_dir or plugin_dir) / manifest.wasm_name
    out.parent.mkdir(parents=True, exist_ok=True)
    # One build of an output at a time (two `wasmext build`s, or a test run's workers,
    # would share its temporary file); the one that waited finds it up to date.
    tmp = out.with_suffix(".wasm.tmp")
    with _output_lock(out):
        try:
            return _build_locked(manifest.id, spec, make_steps, plugin_dir, out, tmp,
                                 progress, verbose, force)
        finally:
            tmp.unlink(missing_ok=True)  # a build stopped midway leaves no partial module


def _build_locked(plugin_id: str, spec: BuildSpec, make_steps: StepsFn, plugin_dir: Path,
                  out: Path, tmp: Path, progress: Progress | None, verbose: Progress | None,
                  force: bool) -> _Built:
    """The build of `out` by one holder of its lock (the caller removes `tmp` after)."""
    roots = _inputs(spec.lang, plugin_dir)
    files = input_files(roots, out)  # read once for both fingerprints below
    # Nothing changed, by what can be told without starting a toolchain (wasmext.buildstamp).
    quick = quick_fingerprint(roots, out, files)
    if not force and is_quick_fresh(out, quick):
        return _Built(BuildResult(plugin_dir, out, (), up_to_date=True), plugin_id,
                      spec.lang)
    try:
        steps = make_steps(spec, plugin_dir, tmp)
    except BuildError as exc:
        raise type(exc)(f"plugin {plugin_id}: {exc}") from exc
    before = fingerprint(roots, steps, out, tmp, files)
    if not force and is_fresh(out, before):
        write_stamp(out, before, quick, steps, roots, files)  # the next no-change build is quick
        return _Built(BuildResult(plugin_dir, out, tuple(steps[-1]), up_to_date=True),
                      plugin_id, spec.lang)
    kept = None if force else kept_output(before)
    if kept is not None:  # built from these very inputs before: the same bytes again
        atomic_write(out, kept)
        write_stamp(out, before, quick, steps, roots, files)
        return _Built(BuildResult(plugin_dir, out, tuple(steps[-1]), kept=True),
                      plugin_id, spec.lang)
    # Zig's cache is content-addressed; one shared folder makes rebuilds cheap.
    env = dict(os.environ)
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(Path.home() / ".cache" / "wasmext-zig"))
    next_steps, settled = steps, before
    for n, cmd in enumerate(steps, 1):
        if n == len(steps) > 1:
            # The earlier steps may have written inputs (npm install: the lock file), and
            # the next build's steps may differ (no install): what the next build will
            # fingerprint, if the last step changes nothing more, is taken here.
            next_steps = make_steps(spec, plugin_dir, tmp)
            settled = fingerprint(roots, next_steps, out, tmp)
        if progress is not None:
            progress(f"{plugin_id}: {spec.lang} step {n}/{len(steps)} ({_step_name(cmd)})")
        if verbose is not None:
            verbose("$ " + " ".join(cmd))
        proc = subprocess.run(cmd, cwd=plugin_dir, env=env, capture_output=True, text=True)
        output = "\n".join(part for part in (proc.stderr.strip(), proc.stdout.strip()) if part)
        if verbose is not None and output:
            verbose(output)
        if proc.returncode != 0:
            err = BuildError(f"plugin {plugin_id}: building {', '.join(spec.sources)} "
                             f"failed: {first_error(output, spec.lang)}"
                             f"{_failure_note(spec.lang)}")
            err.detail = output[-20000:]
            raise err
    durable_replace(tmp, out)
    # A last step that wrote into its own inputs leaves the stamp to the next build.
    after = input_files(roots, out)
    if fingerprint(roots, next_steps, out, tmp, after) == settled:
        write_stamp(out, settled, quick_fingerprint(roots, out, after), next_steps, roots,
                    after)
        keep_output(out, settled)
    return _Built(BuildResult(plugin_dir, out, tuple(steps[-1])), plugin_id, spec.lang)
