"""Red team, second pass: a hostile Python component (componentize-py, the Python guest
SDK) answering with escapes, endless recursion, deep and huge values. Each ends in a
named error or a bounded answer within a generous bound, shows the operator nothing
raw, and the plugin answers afterwards."""

from __future__ import annotations

import time
from typing import Any

import pytest

from support import ROOT, Built
from wasmext import PluginError, Runtime
from wasmext.errors import InvalidOutput, MemoryLimitExceeded, StackOverflow, WasmextError
from wasmext.text import DESCRIPTION_CAP

BOUND_S = 10.0  # generous: the machine running CI is shared
ESC = "\x1b]8;;http://evil\x07click\x1b]8;;\x07\x1b[2J\u202e\r\nFAKE LOG LINE"


def inert(text: str, cap: int) -> None:
    assert len(text) <= cap, len(text)
    assert not any(c in text for c in "\x1b\x07\r\n\u202e"), text[:200]


def failing(plugin: Any, hook: str, data: Any, error: type[WasmextError]) -> WasmextError:
    started = time.monotonic()
    with pytest.raises(error) as info:
        plugin.call(hook, data)
    assert time.monotonic() - started < BOUND_S
    for text in (info.value.message, str(info.value), info.value.describe()):
        inert(text, DESCRIPTION_CAP)
    assert str(ROOT) not in info.value.describe()  # no host path
    assert plugin.call("echo", "alive").value == "alive"
    return info.value


@pytest.fixture
def hostile(components: Built, crt: Runtime) -> Any:
    return crt.load(components["hostile-python"], plugin_id="py-red",
                    limits={"fuel_per_call": 10**10, "timeout_ms": 5000})


def test_an_exception_full_of_escapes_reaches_the_operator_as_one_inert_line(
        hostile: Any) -> None:
    err = failing(hostile, "raise", ESC * 20_000, PluginError)
    assert isinstance(err, PluginError) and err.code == "failed"
    assert "RuntimeError" in err.message


def test_endless_recursion_in_a_handler_is_the_guests_error(hostile: Any) -> None:
    err = failing(hostile, "recurse", 0, PluginError)
    assert "RecursionError" in err.message


def test_an_answer_nested_past_the_abi_limit_is_refused(hostile: Any) -> None:
    err = failing(hostile, "nest", 65, PluginError)
    assert "nested deeper than 64" in err.message


@pytest.mark.parametrize("depth", [5_000, 200_000])
def test_a_very_deep_answer_ends_at_the_wasm_stack(hostile: Any, depth: int) -> None:
    """The guest runs out of its own stack on a value this deep (a trap: the instance is
    replaced), never the host's."""
    failing(hostile, "nest", depth, StackOverflow)


def test_an_answer_at_the_nesting_limit_is_read(hostile: Any) -> None:
    value = hostile.call("nest", 62).value
    for _ in range(62):
        assert isinstance(value, list)
        value = value[0] if value else None


@pytest.mark.parametrize("size", [2_000_000, 4_000_000, 12_000_000])
def test_an_answer_over_the_output_cap_is_invalid_output(hostile: Any, size: int) -> None:
    """Before: past a few MB wasmtime's own copy bound stopped the answer first, and the
    operator saw a GuestTrap quoting wasmtime ("fuel allocated for hostcalls")."""
    err = failing(hostile, "huge", size, InvalidOutput)
    assert "max_output_bytes" in err.message and "hostcalls" not in err.message


def test_an_answer_that_outgrows_the_guests_memory_is_the_memory_cap(hostile: Any) -> None:
    """Building and packing a 40 MB answer meets the 64 MiB cap inside the guest: the
    instance is discarded, the next call gets a fresh one."""
    failing(hostile, "huge", 40_000_000, MemoryLimitExceeded)
