"""A pytest fixture for hosts under test, registered through the pytest11 entry point.

    def test_my_plugin(wasmext_host):
        host = wasmext_host("plugins/my-plugin", (WAT, {"plugin_id": "spy"}))
        with host.session() as s:
            assert s.on_plain_text("x").value == "y"

Hosts made by the fixture are closed when the test ends. Loading this plugin
imports nothing but pytest: wasmtime and the host load when a test uses the fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def wasmext_host() -> Iterator[Callable[..., Any]]:
    """A factory for hosts under test: `wasmext_host(*plugins, config=None) -> Host`.

    Each plugin is WAT text, module bytes, a path (plugin folder, .wasm or .wat),
    or a (source, options) pair with `Host.add` keyword arguments (plugin_id,
    settings, grants, priority, failure...). The host has no plugin folders, no
    disk cache, and (without `config`) its state in memory and its data folder in a
    temporary one: each host starts empty and nothing is written to the project. Every
    host the factory made is closed when the test ends.
    """
    from wasmext.testing import make_host  # wasmtime loads only for tests that use it

    hosts: list[Any] = []

    def factory(*plugins: Any, config: Any = None) -> Any:
        host = make_host(*plugins, config=config)
        hosts.append(host)
        return host

    yield factory
    for host in hosts:
        host.close()
