"""The operator's `[limits.cap]` holds over every plugin a Host loads, also when the
embedding application hands the Host a Runtime of its own."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import wasmtime

from wasmext import MemoryLimitExceeded
from wasmext.config import HostConfig, load_config
from wasmext.host import Host
from wasmext.runtime import Runtime
from wasmext.sandbox.limits import Limits
from wasmext.testing import guest_wat

BOMB = wasmtime.wat2wasm(guest_wat(
    "(loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))\nunreachable"))
HEALTHY = wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "fine"}))
CAP = 4 * 2**20


def _config(tmp_path: Path) -> HostConfig:
    toml = tmp_path / "wasmext.toml"
    toml.write_text(f"[limits.cap]\nmemory_bytes = {CAP}\nfuel_per_call = 1000000\n"
                    "[plugin.bomb.limits]\nmemory_bytes = 268435456\n"
                    "fuel_per_call = 100000000\n")
    return load_config(toml)


@pytest.mark.parametrize("own_runtime", [False, True])
def test_the_cap_holds_over_per_plugin_limits(tmp_path: Path, own_runtime: bool) -> None:
    runtime = Runtime(cache=False) if own_runtime else None  # its own policy is generous
    with Host(_config(tmp_path), runtime=runtime, plugin_dirs=[]) as host:
        host.add(BOMB, plugin_id="bomb")
        host.add(HEALTHY, plugin_id="fine")
        bomb = host.plugins["bomb"].plugin
        assert bomb.limits.memory_bytes == CAP and bomb.limits.fuel_per_call == 1_000_000
        started = time.monotonic()
        with pytest.raises(MemoryLimitExceeded) as caught:
            bomb.call("test", None)
        assert time.monotonic() - started < 10
        assert caught.value.plugin_id == "bomb"
        assert f"{CAP}-byte memory cap" in str(caught.value)
        assert host.plugins["fine"].plugin.call("test", None).value == "fine"


def test_the_runtime_defaults_stay_the_base_below_the_cap() -> None:
    runtime = Runtime(cache=False, defaults=Limits(fuel_per_call=12345))
    with Host(HostConfig(), runtime=runtime, plugin_dirs=[]) as host:
        host.add(HEALTHY, plugin_id="fine")
        assert host.plugins["fine"].plugin.limits.fuel_per_call == 12345
