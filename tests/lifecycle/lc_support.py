"""Plugin folders for the lifecycle tests: tiny real modules that answer a version."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import wasmtime

from wasmext.files import atomic_write
from wasmext.testing import guest_wat

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}


def module(version: str, tools: list[str] = ()) -> bytes:  # type: ignore[assignment]
    reg: dict[str, Any] = {"hooks": [{"hook": "test"}, {"hook": "on_tool"}],
                           "name": "lc", "version": version}
    if tools:
        reg["tools"] = [{"name": t, "description": f"{t} {version}", "input_schema": SCHEMA}
                        for t in tools]
    return bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": version},
                                             registration=reg)))


def write_plugin(parent: Path, pid: str, version: str = "v1", tools: list[str] = (),  # type: ignore[assignment]
                 extra_toml: str = "") -> Path:
    folder = parent / pid
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "0.1.0"\n{extra_toml}')
    atomic_write(folder / f"{pid}.wasm", module(version, tools))
    (folder / "README.md").write_text(f"# {pid}\n")
    return folder


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"),
                                                         str(ROOT / "cli")])}


def cli(*args: str, cwd: Path | None = None) -> list[str]:
    return [sys.executable, "-m", "wasmext_cli", *args]
