"""Build an AssemblyScript plugin with the SDK's pinned `asc` (guest-sdks/assemblyscript).

The compiler comes from npm: `npm ci` in the SDK folder installs the exact
version its package-lock.json names into guest-sdks/assemblyscript/node_modules
(setup-toolchain.sh does that, and installs node first when needed). Plugins
import the SDK as the package "@wasmext/as-sdk"; `--path` points the compiler
at the SDK's node_modules, where `npm ci` links the SDK itself under that name.

The flags keep the module inside the ABI: `--use abort=...` (and trace, seed,
console) route what AssemblyScript would import from "env" to the SDK,
`--exportStart _initialize` makes the module a reactor whose top-level code
(the plugin's definePlugin(...) line) the host runs once, and the minimal
runtime (a collector the SDK runs between calls) suits a long-lived plugin.
Builds are reproducible: sources are named relative to the plugin folder and
the SDK's files as `~lib/@wasmext/as-sdk/...`, so no path of the checkout ends
up in the module.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from wasmext.manifest import BuildSpec
from wasmext_cli.build import ToolchainMissing, sdk_root

PACKAGE = "@wasmext/as-sdk"
RUNTIME = f"~lib/{PACKAGE}/assembly/runtime"
FLAGS = (
    "-O3",
    "--runtime", "incremental",
    "--exportStart", "_initialize",
    "--use", f"abort={RUNTIME}/wasmextAbort",
    "--use", f"trace={RUNTIME}/wasmextTrace",
    "--use", f"seed={RUNTIME}/wasmextSeed",
    "--use", f"console={RUNTIME}/wasmextConsole",
    "--noColors",
)


def sdk_dir() -> Path:
    """The AssemblyScript SDK folder."""
    return sdk_root() / "assemblyscript"


def install_hint(sdk: Path) -> str:
    """How to install the AssemblyScript toolchain."""
    return (f"npm ci --prefix {sdk}   (or, as root on Debian, which also installs node: "
            f"bash {sdk / 'setup-toolchain.sh'})")


def toolchain(sdk: Path) -> tuple[str, Path]:
    """node and the SDK's asc; ToolchainMissing with the install command when absent."""
    node = shutil.which("node")
    if node is None:
        raise ToolchainMissing("the AssemblyScript toolchain needs node (18 or newer), which is "
                               f"not on PATH; install it with: bash {sdk / 'setup-toolchain.sh'}  "
                               "(apt-get install nodejs npm, then npm ci)")
    asc = sdk / "node_modules" / ".bin" / "asc"
    linked = sdk / "node_modules" / PACKAGE / "package.json"
    if not asc.exists() or not linked.exists():
        raise ToolchainMissing("the AssemblyScript compiler is not installed in "
                               f"{sdk / 'node_modules'}; install it with: {install_hint(sdk)}")
    return node, asc


def commands(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[list[str]]:
    """A project with its own package.json (as `wasmext new` makes) compiles with the
    `asc` its node_modules holds, running `npm install` first when that is missing;
    a bare plugin folder uses the SDK's compiler."""
    if (plugin_dir / "package.json").is_file():
        modules = plugin_dir / "node_modules"
        node, npm = shutil.which("node"), shutil.which("npm")
        if node is None or npm is None:
            raise ToolchainMissing("the AssemblyScript toolchain needs node (18 or newer) and "
                                   "npm on PATH; install them with: apt-get install nodejs npm")
        asc = modules / "assemblyscript" / "bin" / "asc.js"
        steps = [] if asc.is_file() and (modules / PACKAGE).exists() else \
            [[npm, "install", "--no-audit", "--no-fund", "--ignore-scripts"]]
    else:
        sdk = sdk_dir()
        node, asc_bin = toolchain(sdk)
        modules, asc, steps = sdk / "node_modules", asc_bin, []
    return [*steps, [
        node, str(asc),
        *spec.sources,  # relative to plugin_dir (the cwd): their names stay path-free
        "--path", str(modules),
        *FLAGS,
        "--outFile", str(out),
    ]]
