"""Build a plugin folder into its .wasm with the toolchain its manifest names.

The toolchains come from PyPI (`ziglang`), so a fresh machine builds every
plugin after `pip install wasmext[build]`; nothing is downloaded at build time.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wasmext.manifest import BuildSpec, load_folder

SDK_ENV = "WASMEXT_SDK_DIR"
ZIG_INSTALL_HINT = "pip install 'wasmext[build]'   (installs the ziglang toolchain)"


class BuildError(Exception):
    """A plugin could not be built; the message says why and what to do."""


class ToolchainMissing(BuildError):
    """The language's toolchain is not installed; the message has the install command."""


@dataclass(frozen=True)
class BuildResult:
    plugin_dir: Path
    wasm: Path
    command: tuple[str, ...]


def sdk_root() -> Path:
    """Where the guest SDKs live: $WASMEXT_SDK_DIR, else the source checkout."""
    env = os.environ.get(SDK_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "guest-sdks"


def _zig() -> list[str]:
    try:
        import ziglang  # noqa: F401
    except ImportError as exc:
        raise ToolchainMissing(
            f"the zig toolchain is missing; install it with: {ZIG_INSTALL_HINT}") from exc
    return [sys.executable, "-m", "ziglang"]


def c_command(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[str]:
    sdk = sdk_root() / "c"
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
    sdk = sdk_root() / "zig" / "src" / "wasmext.zig"
    root = plugin_dir / spec.sources[0]
    return [
        *_zig(), "build-exe", "-target", "wasm32-wasi", "-fno-entry", "-rdynamic",
        "-O", "ReleaseSmall", "-fstrip",
        "--dep", "wasmext", f"-Mroot={root}", f"-Mwasmext={sdk}",
        f"-femit-bin={out}",
    ]


# A language's build: the commands to run in order (the last writes `out`).
StepsFn = Callable[[BuildSpec, Path, Path], list[list[str]]]
COMMANDS: dict[str, StepsFn] = {
    "c": lambda spec, d, out: [c_command(spec, d, out)],
    "zig": lambda spec, d, out: [zig_command(spec, d, out)],
}
# Other languages live in wasmext_cli/build_<lang>.py, each exposing
# `commands(spec, plugin_dir, out) -> list[list[str]]` (raising ToolchainMissing
# with the install command when its toolchain is absent).
LANGUAGES = ("c", "zig", "rust", "assemblyscript", "go", "extism-assemblyscript", "python",
             "javascript")


def commands_for(lang: str) -> StepsFn | None:
    if lang in COMMANDS:
        return COMMANDS[lang]
    if lang not in LANGUAGES:
        return None
    try:
        module = importlib.import_module(f"wasmext_cli.build_{lang.replace('-', '_')}")
    except ModuleNotFoundError:
        return None
    fn: StepsFn = module.commands
    return fn


def build_plugin(plugin_dir: Path, out_dir: Path | None = None) -> BuildResult:
    """Build the plugin in `plugin_dir`; the .wasm lands beside plugin.toml."""
    manifest = load_folder(plugin_dir)  # the folder rules, before resolving any symlink
    plugin_dir = plugin_dir.resolve()
    spec = manifest.build
    if spec is None:
        raise BuildError(f"{plugin_dir / 'plugin.toml'}: no [build] table")
    make_steps = commands_for(spec.lang)
    if make_steps is None:
        raise BuildError(f"{plugin_dir / 'plugin.toml'}: build.lang {spec.lang!r} is not one of "
                         f"{', '.join(LANGUAGES)}")
    out = (out_dir or plugin_dir) / manifest.wasm_name
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".wasm.tmp")
    steps = make_steps(spec, plugin_dir, tmp)
    # Zig's cache is content-addressed; one shared folder makes rebuilds cheap.
    env = dict(os.environ)
    env.setdefault("ZIG_GLOBAL_CACHE_DIR", str(Path.home() / ".cache" / "wasmext-zig"))
    for cmd in steps:
        proc = subprocess.run(cmd, cwd=plugin_dir, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            detail = (proc.stderr.strip() or proc.stdout.strip())[-4000:]
            raise BuildError(f"building {manifest.id} failed ({cmd[0]}):\n{detail}")
    shutil.move(tmp, out)
    return BuildResult(plugin_dir, out, tuple(steps[-1]))
