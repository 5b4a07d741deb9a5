"""Build an Extism plugin written with @extism/as-pdk (installed with the AssemblyScript SDK).

Same compiler and install as `assemblyscript` (npm ci in
guest-sdks/assemblyscript), but no wasmext SDK: the module speaks the Extism
ABI and runs on the Extism backend. `abort` goes to the plugin's own
`onAbort` so the module imports nothing from "env".
"""

from __future__ import annotations

from pathlib import Path

from wasmext.manifest import BuildSpec
from wasmext_cli.build import ToolchainMissing
from wasmext_cli.build.assemblyscript import install_hint, sdk_dir, toolchain


def commands(spec: BuildSpec, plugin_dir: Path, out: Path) -> list[list[str]]:
    """The asc command building an Extism AssemblyScript plugin."""
    sdk = sdk_dir()
    node, asc = toolchain(sdk)
    if not (sdk / "node_modules" / "@extism" / "as-pdk").is_dir():
        raise ToolchainMissing(f"@extism/as-pdk is not installed; install it with: "
                               f"{install_hint(sdk)}")
    entry = spec.sources[0].removesuffix(".ts")
    return [[node, str(asc), *spec.sources, "--path", str(sdk / "node_modules"), "-O3",
             "--runtime", "stub", "--use", f"abort={entry}/onAbort", "--noColors",
             "--outFile", str(out)]]
