"""Build a plugin written in Python into a component with componentize-py.

The result is a WebAssembly component of the world `wasmext:plugin@1.0.0`
(guest-sdks/python/wit, a copy of abi/wit): CPython and the plugin's modules,
pre-initialised. The plugin folder and the SDK (`wasmext_guest`) are the only
module paths (the project's vendored ./wasmext-sdk when `wasmext new` made it,
else the installed SDK); `sources[0]` is the module that defines `WitWorld`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from wasmext.manifest import BuildSpec
from wasmext_cli.build import BuildError, ToolchainMissing, sdk_for

INSTALL_HINT = "pip install 'wasmext[build]'   (installs componentize-py)"


def componentize_py() -> str:
    """The componentize-py executable beside this Python, else on PATH."""
    beside = Path(sys.executable).parent / "componentize-py"
    if beside.is_file():
        return str(beside)
    found = shutil.which("componentize-py")
    if found is None:
        raise ToolchainMissing(f"componentize-py is missing; install it with: {INSTALL_HINT}")
    return found


def commands(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[list[str]]:
    """The componentize-py command building a Python component."""
    sdk = sdk_for("python", plugin_dir)  # a project's vendored ./wasmext-sdk comes first
    entry = spec.sources[0]
    if not entry.endswith(".py") or "/" in entry:
        raise BuildError(f"{plugin_dir / 'plugin.toml'}: build.sources[0] must be a .py file "
                         "in the plugin folder (the module that defines WitWorld)")
    if spec.wit is not None and spec.world is not None:
        # The plugin's own world: its typed exports are its tools, no SDK involved.
        return [[componentize_py(), "-d", str(plugin_dir / spec.wit), "-w", spec.world,
                 "componentize", "-p", str(plugin_dir), entry.removesuffix(".py"),
                 "-o", str(out)]]
    return [[componentize_py(), "-d", str(sdk / "wit"), "-w", "plugin", "componentize",
             "-p", str(plugin_dir), "-p", str(sdk), entry.removesuffix(".py"),
             "-o", str(out)]]
