"""Shared fixtures: a fresh Runtime per test, guest plugins built once per run."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
from wasmext import CompileCache, Plugin, Runtime
from wasmext.testing import guest_wat, load_wat

ROOT = Path(__file__).resolve().parent.parent
HAVE_ZIG = importlib.util.find_spec("ziglang") is not None
needs_zig = pytest.mark.skipif(not HAVE_ZIG, reason="the ziglang toolchain is not installed "
                               "(pip install 'wasmext[build]')")

# Every plugin folder the suite builds: SDK examples, conformance plugins, examples.
PLUGIN_DIRS = {
    "hello-c": ROOT / "guest-sdks" / "c" / "examples" / "hello",
    "conformance-c": ROOT / "guest-sdks" / "c" / "conformance",
    "hello-zig": ROOT / "guest-sdks" / "zig" / "examples" / "hello",
    "conformance-zig": ROOT / "guest-sdks" / "zig" / "conformance",
    "pii-mask": ROOT / "plugins" / "pii-mask",
    "normalize-text": ROOT / "plugins" / "normalize-text",
}


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
def built() -> dict[str, Path]:
    """Build every guest plugin once per test run; returns name -> plugin folder."""
    if not HAVE_ZIG:
        pytest.skip("the ziglang toolchain is not installed (pip install 'wasmext[build]')")
    from wasmext_cli.build import build_plugin

    for folder in PLUGIN_DIRS.values():
        build_plugin(folder)
    return dict(PLUGIN_DIRS)
