"""Attacks on the component sandbox: each ends in a named error, within a time
bound, and the plugin (or a neighbour) answers afterwards."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from support import Built, cancel_call, uleb128
from wasmext import (
    Cancelled,
    MemoryLimitExceeded,
    ModuleTooLarge,
    OutOfFuel,
    PluginError,
    Runtime,
    Timeout,
    UnknownImport,
)
from wasmext.errors import BlockingWaitDenied
from wasmext.sandbox.wasmcheck import ModuleCaps

BOUND_S = 10.0  # generous: the machine running CI is shared


def timed(fn: Any, *args: Any) -> float:
    started = time.monotonic()
    fn(*args)
    return time.monotonic() - started


def test_infinite_loop_runs_out_of_fuel(components: Built, crt: Runtime) -> None:
    plugin = crt.load(components["hostile-python"], plugin_id="spin-fuel",
                      limits={"fuel_per_call": 20_000_000, "timeout_ms": 60_000})

    def spin() -> None:
        with pytest.raises(OutOfFuel, match="20000000 fuel"):
            plugin.call("spin")
    assert timed(spin) < BOUND_S
    assert plugin.call("echo", "alive").value == "alive"


def test_infinite_loop_hits_the_deadline(components: Built, crt: Runtime) -> None:
    plugin = crt.load(components["hostile-python"], plugin_id="spin-time",
                      limits={"fuel_per_call": 10**10, "timeout_ms": 200})

    def spin() -> None:
        with pytest.raises(Timeout, match="200 ms"):
            plugin.call("spin")
    assert timed(spin) < BOUND_S
    assert plugin.call("echo", "alive").value == "alive"


def test_a_sleep_cannot_outlast_the_deadline(components: Built, crt: Runtime) -> None:
    """time.sleep is WASI's monotonic-clock subscription plus a poll, which would wait in
    host code past any deadline (4 s under 500 ms): the subscription itself is refused."""
    plugin = crt.load(components["hostile-python"], plugin_id="sleeper",
                      limits={"fuel_per_call": 10**10, "timeout_ms": 500})
    started = time.monotonic()
    with pytest.raises(BlockingWaitDenied, match="monotonic clock") as info:
        plugin.call("sleep", 4.0)
    assert time.monotonic() - started < 3.0
    assert info.value.plugin_id == "sleeper" and info.value.hook == "sleep"
    assert plugin.call("echo", "alive").value == "alive"


def test_a_short_sleep_is_refused_too(components: Built, crt: Runtime) -> None:
    """Even a sleep that fits the deadline: no wait on time is offered, so none is
    left for a cancel to chase."""
    plugin = crt.load(components["hostile-python"], plugin_id="napper",
                      limits={"fuel_per_call": 10**10, "timeout_ms": 30_000})
    error, ran, _ = cancel_call(plugin, "sleep", 0.05, after_s=1.0)
    assert isinstance(error, BlockingWaitDenied), repr(error)
    assert not isinstance(error, Cancelled) and ran < 1.0  # over before the cancel came
    assert plugin.call("echo", "alive").value == "alive"


def test_memory_bomb_stops_at_the_cap(components: Built, crt: Runtime) -> None:
    plugin = crt.load(components["hostile-python"], plugin_id="bomb",
                      limits={"memory_bytes": 96 * 2**20, "fuel_per_call": 10**10,
                              "timeout_ms": 30_000})

    def bomb() -> None:
        with pytest.raises(MemoryLimitExceeded, match="memory cap"):
            plugin.call("bomb")
    assert timed(bomb) < BOUND_S
    assert plugin.call("echo", "alive").value == "alive"


@pytest.mark.parametrize(("hook", "data"), [
    ("read_file", "/etc/passwd"),
    ("read_file", "app.py"),
    ("list_dir", "/"),
])
def test_no_filesystem(components: Built, crt: Runtime, hook: str,
                       data: Any) -> None:
    plugin = crt.load(components["hostile-python"], plugin_id="fs")
    with pytest.raises(PluginError) as info:
        plugin.call(hook, data)
    assert info.value.code == "failed"
    assert "Error" in info.value.message
    assert plugin.call("echo", "alive").value == "alive"


def test_no_environment(components: Built, crt: Runtime,
                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WASMEXT_TEST_SECRET", "do-not-leak")
    plugin = crt.load(components["hostile-python"], plugin_id="env")
    assert plugin.call("env").value == {}


def test_no_sockets(components: Built, crt: Runtime) -> None:
    with socket.socket() as server:  # a real listener the guest must not reach
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        plugin = crt.load(components["hostile-python"], plugin_id="net")
        with pytest.raises(PluginError) as info:
            plugin.call("connect", ["127.0.0.1", port])
        assert info.value.code == "failed"
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()
    assert plugin.call("echo", "alive").value == "alive"


def test_unknown_interface_is_refused_at_link(crt: Runtime, healthy: Any) -> None:
    evil = bytes(wasmtime.wat2wasm(
        '(component (import "evil:net/raw@1.0.0" (instance (export "send" (func)))))'))

    def load() -> None:
        with pytest.raises(UnknownImport, match=r"evil:net/raw@1\.0\.0"):
            crt.load(evil, plugin_id="evil")
    assert timed(load) < BOUND_S
    assert healthy.call("x").value == "alive"


def test_huge_component_is_refused_before_compiling(tmp_path: Path) -> None:
    tiny = bytes(wasmtime.wat2wasm("(component)"))
    payload = b"\x04junk" + b"\0" * (3 * 2**20)
    huge = tiny + b"\x00" + uleb128(len(payload)) + payload  # one custom section
    with Runtime(cache=False, module_caps=ModuleCaps(max_module_bytes=2**20)) as rt:
        def load() -> None:
            with pytest.raises(ModuleTooLarge, match="max_module_bytes"):
                rt.load(huge, plugin_id="huge")
        assert timed(load) < BOUND_S
