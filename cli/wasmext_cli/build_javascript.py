"""Build a plugin written in JavaScript into a component with componentize-js.

The result is a WebAssembly component of the world `wasmext:plugin@1.0.0`
(guest-sdks/javascript/wit, a copy of abi/wit). `componentize-js` is the npm
package pinned in guest-sdks/javascript/package-lock.json; its setup script
installs it into guest-sdks/javascript/node_modules. `sources[0]` is the
plugin's ES module; guest-sdks/javascript/bundle.mjs folds the SDK into it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from wasmext.manifest import BuildSpec
from wasmext_cli.build import BuildError, ToolchainMissing, sdk_root


def sdk_dir() -> Path:
    return sdk_root() / "javascript"


def install_hint(sdk: Path) -> str:
    return (f"npm ci --prefix {sdk}   (or, as root on Debian, which also installs node: "
            f"bash {sdk / 'setup-toolchain.sh'})")


def commands(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[list[str]]:
    sdk = sdk_dir()
    node = shutil.which("node")
    if node is None:
        raise ToolchainMissing(f"node is missing; install it with: {install_hint(sdk)}")
    if not (sdk / "node_modules" / "@bytecodealliance" / "componentize-js").is_dir():
        raise ToolchainMissing("@bytecodealliance/componentize-js is not installed; install it "
                               f"with: {install_hint(sdk)}")
    entry = spec.sources[0]
    if not entry.endswith((".js", ".mjs")) or "/" in entry:
        raise BuildError(f"{plugin_dir / 'plugin.toml'}: build.sources[0] must be a .js file "
                         "in the plugin folder (the plugin's ES module)")
    return [[node, str(sdk / "componentize.mjs"), str(plugin_dir / entry), str(out)]]
