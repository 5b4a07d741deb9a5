"""Shared fixtures: a fresh Runtime per test, guest plugins built once per run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support import Built, build_once, plugin_dirs
from wasmext import CompileCache, Plugin, Runtime
from wasmext.testing import guest_wat, load_wat


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    cache = CompileCache(tmp_path / "cache" / "modules", tmp_path / "cache" / "key")
    with Runtime(cache=cache) as rt:
        yield rt


@pytest.fixture
def healthy(runtime: Runtime) -> Plugin:
    """A well-behaved plugin in the same runtime, to prove the host keeps serving."""
    return load_wat(runtime, guest_wat(response={"ok": True, "value": "alive"}),
                    plugin_id="healthy")


@pytest.fixture(scope="session")
def built() -> Built:
    """Build every guest plugin once per test run.

    A plugin whose toolchain is not installed is skipped with the install
    command as the reason; any other build failure fails the tests using it.
    """
    from wasmext_cli.build import BuildError, ToolchainMissing

    result = Built()
    for name, folder in plugin_dirs().items():
        try:
            build_once(folder)
        except ToolchainMissing as exc:
            result.missing[name] = str(exc)
        except BuildError as exc:
            result.broken[name] = str(exc)
        else:
            result.dirs[name] = folder
    return result
