"""Component plugins, built once per test run, and one compile cache for all of them.

A component takes ~25 s to build and 15-50 s to compile, so each is built
once per run (support.build_once, shared with the cross-SDK suite's `built`)
and compiled once per process (the backend keeps what it compiled); the
compile cache folder is shared by every test here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import ROOT, build_once
from wasmext import CompileCache, Runtime

COMPONENT_PLUGINS = {
    "hello-python": ROOT / "guest-sdks" / "python" / "examples" / "hello",
    "conformance-python": ROOT / "guest-sdks" / "python" / "conformance",
    "hostile-python": ROOT / "tests" / "plugins" / "python-hostile",
    "json-check": ROOT / "plugins" / "json-check",
}


@pytest.fixture(scope="session")
def component_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # $WASMEXT_TEST_COMPONENT_CACHE keeps compiled components between local runs.
    kept = os.environ.get("WASMEXT_TEST_COMPONENT_CACHE")
    return Path(kept) if kept else tmp_path_factory.mktemp("component-cache")


@pytest.fixture(scope="session")
def components() -> dict[str, Path]:
    """The component plugin folders, built; skipped without componentize-py."""
    from wasmext_cli.build import ToolchainMissing

    out = {}
    for name, folder in COMPONENT_PLUGINS.items():
        try:
            out[name] = build_once(folder)
        except ToolchainMissing as exc:
            pytest.skip(str(exc))
    return out


@pytest.fixture
def crt(component_cache_dir: Path) -> Iterator[Runtime]:
    """A runtime whose compile cache is the run's shared component cache."""
    with Runtime(cache=CompileCache(component_cache_dir / "modules",
                                    component_cache_dir / "key")) as rt:
        yield rt
