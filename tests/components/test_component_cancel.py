"""A cancelled call of a component plugin spinning in Python ends with `Cancelled`
promptly (its store is watched like a core module's), and the plugin answers again."""

from __future__ import annotations

from support import Built, cancel_call
from wasmext import Cancelled, Runtime

TIMEOUT_MS = 30_000


def test_a_cancelled_spinning_component_ends_promptly(components: Built,
                                                      crt: Runtime) -> None:
    plugin = crt.load(components["hostile-python"], plugin_id="spin-cancel",
                      limits={"fuel_per_call": 10**10, "timeout_ms": TIMEOUT_MS})
    error, ran, after_cancel = cancel_call(plugin, "spin", None, after_s=0.5)
    assert isinstance(error, Cancelled), repr(error)
    assert error.plugin_id == "spin-cancel" and error.hook == "spin"
    assert ran >= 0.5
    assert after_cancel < TIMEOUT_MS / 1000 / 2
    assert plugin.faults == 0
    assert plugin.call("echo", "alive").value == "alive"
