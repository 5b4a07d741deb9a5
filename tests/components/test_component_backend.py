"""The component backend: Python components behind the plugin interface."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import wasmtime

from support import Built
from wasmext import CompileCache, InputTooLarge, InvalidOutput, PluginError, Runtime
from wasmext.sandbox.backends.component import forget_compiled, is_component
from wasmext.sandbox.backends.component_instance import ComponentPlugin
from wasmext.testing import guest_wat


def component_cache(folder: Path) -> CompileCache:
    return CompileCache(folder / "modules", folder / "cache.key")  # support.run_cache's


def test_a_component_is_told_from_a_core_module_by_its_header() -> None:
    core = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True})))
    comp = bytes(wasmtime.wat2wasm("(component)"))
    assert is_component(comp) and not is_component(core)
    assert not is_component(b"\0asm") and not is_component(b"")


# The conformance component, not the SDK's hello: the default tier builds it anyway, and
# the hello (a component of its own) is built only by the slow tier's CLI test.
def test_a_component_answers_with_its_setting(components: Built, crt: Runtime) -> None:
    plugin = crt.load(components["conformance-python"], plugin_id="set",
                      settings={"greeting": "Servus"})
    assert isinstance(plugin, ComponentPlugin)
    assert plugin.call("config", "greeting").value == "Servus"
    with pytest.raises(PluginError) as info:
        plugin.call("config", 42)
    assert info.value.code == "invalid"
    described = plugin.describe()
    assert described["backend"] == "component"
    assert "wasmext:plugin/host@1.0.0.*" in described["imports"]
    assert "config" in [h["hook"] for h in described["hooks"]]


def test_only_the_first_load_compiles(components: Built, component_cache_dir: Path
                                      ) -> None:
    with Runtime(cache=component_cache(component_cache_dir)) as rt:
        rt.load(components["conformance-python"])  # compiled or loaded: now on disk
    forget_compiled()  # as a new process would: only the disk cache is left
    cache = component_cache(component_cache_dir)
    with Runtime(cache=cache) as rt:
        plugin = rt.load(components["conformance-python"])
        assert plugin.call("echo", "Bo").value == "Bo"
    assert (cache.hits, cache.misses) == (1, 0)


def test_instances_are_pooled_per_caller(components: Built, crt: Runtime) -> None:
    plugin = crt.load(components["conformance-python"])
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(5):
                assert plugin.call("echo", [n, i]).value == [n, i]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert plugin.calls == 15


def test_input_and_host_request_caps(components: Built, crt: Runtime) -> None:
    plugin = crt.load(components["conformance-python"], plugin_id="caps",
                      limits={"max_input_bytes": 4096, "max_host_request_bytes": 1024})
    with pytest.raises(InputTooLarge):
        plugin.call("echo", "x" * 5000)
    with pytest.raises(InvalidOutput, match="host-call request over 1024 bytes"):
        plugin.call("host", {"op": "log", "msg": "y" * 2000})
    assert plugin.call("echo", "small").value == "small"


def test_guest_log_lines_are_scrubbed_and_bounded(components: Built,
                                                  crt: Runtime) -> None:
    plugin = crt.load(components["conformance-python"], plugin_id="logs",
                      limits={"max_log_line_bytes": 64})
    plugin.call("log", "\x1b[31mred\x1b[0m " + "z" * 500)
    line = plugin.log.lines[-1].text
    assert "\x1b" not in line and len(line.encode()) <= 64 + 8
