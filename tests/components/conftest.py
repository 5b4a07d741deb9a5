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

from support import ROOT, Built
from wasmext import CompileCache, Runtime

COMPONENT_PLUGINS = {
    "hello-python": ROOT / "guest-sdks" / "python" / "examples" / "hello",
    "conformance-python": ROOT / "guest-sdks" / "python" / "conformance",
    "hostile-python": ROOT / "tests" / "plugins" / "python-hostile",
    "json-check": ROOT / "plugins" / "json-check",
}


@pytest.fixture(scope="session")
def component_cache_dir() -> Path:
    """Compiled components kept between runs (a compile takes 15-30 s), in
    $WASMEXT_TEST_COMPONENT_CACHE or the user's cache folder; the cache authenticates
    what it reads, so a stale or foreign entry is recompiled, never trusted."""
    kept = os.environ.get("WASMEXT_TEST_COMPONENT_CACHE")
    return Path(kept) if kept else Path.home() / ".cache" / "wasmext-tests" / "components"


@pytest.fixture(scope="session")
def components() -> Built:
    """The component plugin folders, each built when first asked for."""
    return Built(folders=dict(COMPONENT_PLUGINS))


@pytest.fixture
def crt(component_cache_dir: Path) -> Iterator[Runtime]:
    """A runtime whose compile cache is the run's shared component cache."""
    with Runtime(cache=CompileCache(component_cache_dir / "modules",
                                    component_cache_dir / "key")) as rt:
        yield rt
