"""Helpers of the OCI tests: tiny real plugin folders whose blobs never repeat."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import wasmtime

from wasmext.files import atomic_write
from wasmext.testing import guest_wat

_counter = itertools.count()


def fresh_name() -> str:
    """A name no other test of this run (or process) uses."""
    return f"{os.getpid()}x{next(_counter)}"


def write_plugin(parent: Path, pid: str, answer: str) -> Path:
    """A built plugin folder whose `test` hook answers `answer`; its README is unique, so
    its blobs are too (a registry stores blobs by digest, shared between repositories,
    and the tests tamper with them)."""
    folder = parent / pid
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin.toml").write_text(f'id = "{pid}"\nversion = "0.1.0"\n')
    registration = {"hooks": [{"hook": "test"}], "name": pid, "version": "0.1.0"}
    atomic_write(folder / f"{pid}.wasm", bytes(wasmtime.wat2wasm(guest_wat(
        response={"ok": True, "value": answer}, registration=registration))))
    (folder / "README.md").write_text(f"# {pid} {fresh_name()}\n")
    return folder
