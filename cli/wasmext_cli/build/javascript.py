"""Build a plugin written in JavaScript into a component with componentize-js.

The result is a WebAssembly component of the world `wasmext:plugin@1.0.0`
(guest-sdks/javascript/wit, a copy of abi/wit). `sources[0]` is the plugin's
ES module; the SDK's bundle.mjs folds the SDK into it and componentize.mjs
hands the result to `componentize-js`, the npm package the SDK's package.json
pins. Node finds that package by walking up from the SDK folder, so:

- a project made by `wasmext new` (its own package.json pinning componentize-js,
  the SDK vendored in ./wasmext-sdk) builds with the project's node_modules,
  which `wasmext build` fills with `npm install` when it is missing; this works
  from an installed wheel, which carries no node_modules;
- a bare plugin folder uses the installed SDK, whose node_modules
  guest-sdks/javascript/setup-toolchain.sh fills (a checkout, or CI).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from wasmext.manifest import BuildSpec
from wasmext_cli.build import VENDORED_SDK, BuildError, ToolchainMissing, sdk_root

PACKAGE = "@bytecodealliance/componentize-js"
NODE_HINT = "apt-get install nodejs npm"


def sdk_dir() -> Path:
    """The JavaScript SDK folder."""
    return sdk_root() / "javascript"


def install_hint(sdk: Path) -> str:
    """How to install the JavaScript toolchain."""
    return (f"npm ci --prefix {sdk}   (or, as root on Debian, which also installs node: "
            f"bash {sdk / 'setup-toolchain.sh'})")


def _which(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        raise ToolchainMissing(f"{tool} is missing; JavaScript plugins need node (18 or newer) "
                               f"and npm: install them with: {NODE_HINT}")
    return found


def commands(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[list[str]]:
    """The steps building a JavaScript component (npm install first when needed)."""
    entry = spec.sources[0]
    if not entry.endswith((".js", ".mjs")) or "/" in entry:
        raise BuildError(f"{plugin_dir / 'plugin.toml'}: build.sources[0] must be a .js file "
                         "in the plugin folder (the plugin's ES module)")
    vendored = plugin_dir / VENDORED_SDK
    steps: list[list[str]] = []
    if (plugin_dir / "package.json").is_file() and vendored.is_dir():
        sdk, node = vendored, _which("node")
        if not (plugin_dir / "node_modules" / PACKAGE / "package.json").is_file():
            steps.append([_which("npm"), "install", "--no-audit", "--no-fund",
                          "--ignore-scripts"])
    else:
        sdk, node = sdk_dir(), _which("node")
        if not (sdk / "node_modules" / PACKAGE).is_dir():
            raise ToolchainMissing(f"{PACKAGE} is not installed; install it with: "
                                   f"{install_hint(sdk)}")
    return [*steps, [node, str(sdk / "componentize.mjs"), str(plugin_dir / entry), str(out)]]
