"""Component plugins, built once per test run, and one compile cache for all of them.

A component takes ~25 s to build and 15-50 s to compile, so each is built
once per run (support.build_once, shared with the cross-SDK suite's `built`)
and compiled once per process (the backend keeps what it compiled); the
compile cache folder (the `crt` fixture of tests/conftest.py) is shared by every test
that loads a component.
"""

from __future__ import annotations

import pytest

from support import ROOT, Built

COMPONENT_PLUGINS = {
    "hello-python": ROOT / "guest-sdks" / "python" / "examples" / "hello",
    "conformance-python": ROOT / "guest-sdks" / "python" / "conformance",
    "conformance-javascript": ROOT / "guest-sdks" / "javascript" / "conformance",
    "json-hostile-js": ROOT / "tests" / "plugins" / "json-hostile-js",
    "hostile-python": ROOT / "tests" / "plugins" / "python-hostile",
    "json-check": ROOT / "plugins" / "json-check",
    "wit-calc": ROOT / "tests" / "plugins" / "wit-calc",
}


@pytest.fixture(scope="session")
def components() -> Built:
    """The component plugin folders, each built when first asked for."""
    return Built(folders=dict(COMPONENT_PLUGINS))
