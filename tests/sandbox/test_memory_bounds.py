"""ptr/len validation: whatever a guest returns, the host reads only its memory."""

from __future__ import annotations

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wasmext import InvalidOutput, PluginFault, Runtime
from wasmext.sandbox.limits import WASM_PAGE
from wasmext.testing import guest_wat, load_wat

PAGES = 2
SLOT = 16  # the guest returns the i64 stored here, which the test writes first
RESPONSE = msgpack.packb({"ok": True, "value": "in bounds"})
RESPONSE_AT = 20000

u32 = st.integers(min_value=0, max_value=2**32 - 1)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ptr=u32, length=u32)
def test_any_packed_pointer(runtime: Runtime, ptr: int, length: int) -> None:
    plugin = runtime.plugins.get("bounds") or load_wat(
        runtime, guest_wat(f"(i64.load (i32.const {SLOT}))", memory_pages=PAGES),
        plugin_id="bounds", limits={"max_output_bytes": 2**32 - 1})
    inst = plugin._borrow()
    try:
        inst.memory.write(SLOT, ((ptr << 32) | length).to_bytes(8, "little"))
        inst.memory.write(RESPONSE_AT, RESPONSE)
        try:
            result = inst.call("test", None)
        except InvalidOutput:
            # Anything but the one valid buffer is refused, in bounds or not.
            assert (ptr, length) != (RESPONSE_AT, len(RESPONSE))
            assert (ptr, length) != (0, 0)
            return
        except PluginFault as other:  # pragma: no cover - would be a host bug
            raise AssertionError(f"unexpected {other!r}") from other
        if length == 0 and ptr == 0:
            assert result.changed is False
        else:
            assert (ptr, length) == (RESPONSE_AT, len(RESPONSE))
            assert result.value == "in bounds"
    finally:
        plugin._release(inst)


@given(ptr=u32, length=st.integers(min_value=0, max_value=3 * WASM_PAGE))
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_memory_view_read_matches_bounds(runtime: Runtime, ptr: int, length: int) -> None:
    plugin = runtime.plugins.get("view") or load_wat(runtime, guest_wat(), plugin_id="view")
    inst = plugin._borrow()
    data = inst.memory.read(ptr, length)
    if ptr + length <= inst.memory.size():
        assert data is not None and len(data) == length
    else:
        assert data is None
    plugin._release(inst)
