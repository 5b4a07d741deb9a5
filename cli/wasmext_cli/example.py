"""The example session shipped in the wheel: `wasmext run` with no arguments.

wasmext_cli/example/ holds the example plugins' manifests and prebuilt
modules (C and Zig), the demo transcript and policy,
copied from plugins/ and docs/examples/. They are prebuilt and committed
rather than built when the wheel is built, so building a wheel needs no
compiler and a user without one still sees every hook kind fire right after
`pip install`. tests/cli/test_example_session.py fails when a copy differs
from its source or a module from a fresh build of it; then refresh with

    python -m wasmext_cli.example --refresh
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wasmext import HostConfig

__all__ = ["PLUGINS", "example_config", "example_root", "refresh"]

PLUGINS = ("agent-guard", "normalize-text", "pii-mask", "text-tags", "turn-audit")
DOCS_FILES = ("transcript.json", "policy.toml")


def example_root() -> Path:
    """The example folder inside the installed wasmext_cli package."""
    return Path(str(resources.files("wasmext_cli") / "example"))


def example_config(data_dir: str | Path = ".wasmext") -> HostConfig:
    """The example session's host config, its plugins read from the installed package and
    its state kept in `data_dir` (relative to the working folder), never inside the
    package: what the README's ten lines of Python and `wasmext run` with no
    arguments load."""
    from wasmext import load_config

    return dataclasses.replace(load_config(example_root() / "wasmext.toml"),
                               data_dir=Path(data_dir).absolute())


def checkout() -> Path:
    """The source checkout the package lives in."""
    return Path(__file__).resolve().parents[2]


def refresh(root: Path | None = None) -> list[Path]:
    """Build the example plugins of the checkout and copy them and the session files here."""
    from wasmext.files import atomic_write
    from wasmext_cli.build import build_plugin

    src = root or checkout()
    dest = example_root()
    written = []
    for name in DOCS_FILES:
        atomic_write(dest / name, (src / "docs" / "examples" / name).read_bytes())
        written.append(dest / name)
    for plugin in PLUGINS:
        folder = dest / "plugins" / plugin
        folder.mkdir(parents=True, exist_ok=True)
        wasm = build_plugin(src / "plugins" / plugin).wasm
        manifest = (src / "plugins" / plugin / "plugin.toml").read_bytes()
        atomic_write(folder / "plugin.toml", manifest)
        atomic_write(folder / wasm.name, wasm.read_bytes())
        written += [folder / "plugin.toml", folder / wasm.name]
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line: rebuild the example plugins and print the refreshed files."""
    parser = argparse.ArgumentParser(prog="python -m wasmext_cli.example", description=__doc__)
    parser.add_argument("--refresh", action="store_true", required=True,
                        help="rebuild the example plugins and copy the session files")
    parser.parse_args(argv)
    for path in refresh():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
