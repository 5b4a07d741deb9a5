"""Starting an instance reuses what it can (the decoded registration of the same bytes,
the raw store and instantiate entries) and still gives every instance its own state
and its own limits; a dropped instance frees its store at once."""

from __future__ import annotations

import gc
import time
import weakref

import msgpack
import pytest
import wasmtime

from wasmext import MemoryLimitExceeded, OutOfFuel, Runtime, Timeout
from wasmext.sandbox import calltree, fastcall
from wasmext.sandbox.callscope import CallScope
from wasmext.sandbox.plugin import Plugin
from wasmext.testing import DATA_AT, guest_wat, load_wat, packed

FIRST = msgpack.packb({"ok": True, "value": "first"})
SECOND = msgpack.packb({"ok": True, "value": "second"})
# Answers `first` on an instance's first call, `second` after: the flag is a global.
ONCE_BODY = ("(if (result i64) (i32.eqz (global.get $seen))"
             f"  (then (global.set $seen (i32.const 1)) (i64.const {packed(DATA_AT, len(FIRST))}))"
             f"  (else (i64.const {packed(DATA_AT + 64, len(SECOND))})))")
ONCE = guest_wat(ONCE_BODY, extra="(global $seen (mut i32) (i32.const 0))",
                 data=FIRST.ljust(64, b"\0") + SECOND)
# Answers `first` when memory grew by 10 pages, `second` when the grow was refused.
GROW = guest_wat(
    "(if (result i64) (i32.eq (memory.grow (i32.const 10)) (i32.const -1))"
    f"  (then (i64.const {packed(DATA_AT + 64, len(SECOND))}))"
    f"  (else (i64.const {packed(DATA_AT, len(FIRST))})))",
    data=FIRST.ljust(64, b"\0") + SECOND)


@pytest.fixture(params=["fast", "public"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "public":
        monkeypatch.setattr(fastcall, "_RAW", None)
    return str(request.param)


def test_instances_share_no_globals_or_memory(runtime: Runtime, path: str) -> None:
    plugin = load_wat(runtime, ONCE, plugin_id="once")
    a, b = plugin.new_instance(), plugin.new_instance()
    assert a.call("test", None).value == "first"
    assert a.call("test", None).value == "second"  # a's global is set...
    assert b.call("test", None).value == "first"   # ...b's is not
    assert plugin.new_instance().call("test", None).value == "first"
    a.memory.write(60_000, b"secret")
    assert b.memory.read(60_000, 6) == bytes(6)
    assert plugin.new_instance().memory.read(60_000, 6) == bytes(6)


def test_every_new_instance_keeps_its_limits(runtime: Runtime, path: str) -> None:
    capped = load_wat(runtime, GROW, plugin_id="capped", limits={"memory_bytes": 8 * 65536})
    roomy = load_wat(runtime, GROW, plugin_id="roomy")
    for _ in range(3):
        assert capped.new_instance().call("test", None).value == "second"  # grow refused
        assert roomy.new_instance().call("test", None).value == "first"
    spin = load_wat(runtime, guest_wat("(loop (br 0)) (i64.const 0)"), plugin_id="spin",
                    limits={"fuel_per_call": 10_000})
    for _ in range(3):
        with pytest.raises(OutOfFuel):
            spin.new_instance().call("test", None)
    slow = load_wat(runtime, guest_wat("(loop (br 0)) (i64.const 0)"), plugin_id="slow",
                    limits={"fuel_per_call": 10**12, "timeout_ms": 300})
    for _ in range(2):
        started = time.monotonic()
        with pytest.raises(Timeout):
            slow.new_instance().call("test", None)
        assert time.monotonic() - started < 3
    table = guest_wat(extra="(table 10 funcref)")
    with pytest.raises(MemoryLimitExceeded):
        load_wat(runtime, table, plugin_id="table", limits={"table_elements": 5})
    healthy = load_wat(runtime, guest_wat(response={"ok": True, "value": "alive"}),
                       plugin_id="healthy")
    assert healthy.call("test").value == "alive"


def test_a_dropped_instance_frees_its_store_without_the_collector(
        runtime: Runtime, path: str) -> None:
    plugin = load_wat(runtime, ONCE, plugin_id="drop")
    gc.collect()
    gc.disable()
    try:
        inst = plugin.new_instance()
        inst.call("test", None)
        store = weakref.ref(inst.store)
        del inst
        assert store() is None
        assert plugin.new_instance().call("test", None).value == "first"
    finally:
        gc.enable()


def test_the_decoded_registration_is_reused_only_for_the_same_bytes(runtime: Runtime) -> None:
    plugin = load_wat(runtime, guest_wat(hooks=("first",)), plugin_id="reg")
    cached = plugin.module.last_registration
    assert cached is not None and msgpack.unpackb(cached[0]) == cached[1]
    plugin.new_instance()
    assert plugin.module.last_registration[1] is cached[1]  # the same bytes: not decoded
    # Other bytes never take the cached map: the guest's own answer is decoded.
    plugin.module.last_registration = (msgpack.packb({"hooks": []}), {"hooks": []})
    plugin.new_instance()
    assert plugin.registration.hook_names == ("first",)
    assert plugin.module.last_registration[0] == cached[0]
    # A reload of the same code starts with nothing of the old load's.
    again = load_wat(runtime, guest_wat(hooks=("first",)), plugin_id="reg-again")
    assert again.module is not plugin.module
    assert again.module.last_registration is not None
    assert again.module.last_registration[1] is not cached[1]


def test_new_store_is_a_store_like_wasmtimes(runtime: Runtime) -> None:
    engine = load_wat(runtime, guest_wat(), plugin_id="store").module.engine.engine
    store = fastcall.new_store(engine)
    store.set_fuel(1234)
    assert store.get_fuel() == 1234
    assert store.engine is engine
    store.close()
    with pytest.raises(ValueError, match="closed"):
        store.set_fuel(1)


def test_a_cancel_passes_over_a_frame_whose_instance_is_gone(runtime: Runtime) -> None:
    """A cancel's snapshot of the call stacks may hold the frame of a call that just
    ended; the instance it names (through a proxy) may be gone by then."""
    plugin = load_wat(runtime, ONCE, plugin_id="gone")
    inst = plugin.new_instance()
    frame = calltree.Frame(time.monotonic() + 10, 5, None, inst.budget.guest)
    del inst
    CallScope._interrupt([frame])
    assert frame.deadline < time.monotonic()
    assert plugin.call("test").value == "first"


def _with_start(body: str) -> str:
    """ONCE's guest with a start function running `body` when each instance is made."""
    return guest_wat(ONCE_BODY, data=FIRST.ljust(64, b"\0") + SECOND,
                     extra=f"(global $seen (mut i32) (i32.const 0)) (func $begin {body}) "
                           "(start $begin)")


def test_a_start_function_runs_under_each_instances_budget(runtime: Runtime,
                                                           healthy: Plugin) -> None:
    with pytest.raises(OutOfFuel):
        load_wat(runtime, _with_start("(loop (br 0))"), plugin_id="fuel",
                 limits={"fuel_per_call": 10_000})
    started = time.monotonic()
    with pytest.raises(Timeout):
        load_wat(runtime, _with_start("(loop (br 0))"), plugin_id="time",
                 limits={"fuel_per_call": 10**12, "timeout_ms": 300})
    assert time.monotonic() - started < 3
    # The start function sets the flag in every instance: each first call sees it set.
    flagged = load_wat(runtime, _with_start("(global.set $seen (i32.const 1))"),
                       plugin_id="flagged")
    for _ in range(3):
        assert flagged.new_instance().call("test", None).value == "second"
    assert load_wat(runtime, ONCE, plugin_id="plain").call("test").value == "first"
    assert healthy.call("test").value == "alive"


# The registration protocol (wasmext_abi_version, the request buffer's wasmext_alloc,
# wasmext_register) runs under one budget: a fault in any is still named after it.
def test_a_start_up_alloc_that_spins_is_out_of_fuel_naming_wasmext_alloc(
        runtime: Runtime) -> None:
    wat = guest_wat(alloc_body="(loop $spin (br $spin)) (i32.const 0)")
    started = time.monotonic()
    with pytest.raises(OutOfFuel, match="in wasmext_alloc") as info:
        load_wat(runtime, wat, plugin_id="spinner", limits={"fuel_per_call": 1_000_000})
    assert time.monotonic() - started < 3
    assert info.value.plugin_id == "spinner"
    healthy = load_wat(runtime, guest_wat(response={"ok": True, "value": "alive"}),
                       plugin_id="healthy")
    assert healthy.call("test").value == "alive"


def test_a_start_up_alloc_past_the_deadline_is_a_timeout(runtime: Runtime) -> None:
    wat = guest_wat(alloc_body="(loop $spin (br $spin)) (i32.const 0)")
    started = time.monotonic()
    with pytest.raises(Timeout):
        load_wat(runtime, wat, limits={"fuel_per_call": 10**10, "timeout_ms": 200})
    assert time.monotonic() - started < 3


def test_a_start_up_alloc_trap_and_refusal_are_named(runtime: Runtime) -> None:
    from wasmext import AbiMismatch, GuestTrap, InvalidOutput

    with pytest.raises(GuestTrap, match="wasmext_alloc"):
        load_wat(runtime, guest_wat(alloc_body="unreachable"))
    with pytest.raises(InvalidOutput, match=r"wasmext_alloc\(\d+\) returned 0"):
        load_wat(runtime, guest_wat(alloc_body="(i32.const 0)"))
    with pytest.raises(AbiMismatch, match="major 2"):
        load_wat(runtime, guest_wat(abi_version=2))


# Grows its table by 100 elements: `first` when the table grew, `second` when refused.
TABLE_GROW = guest_wat(
    "(if (result i64) (i32.eq (table.grow $t (ref.null func) (i32.const 100)) (i32.const -1))"
    f"  (then (i64.const {packed(DATA_AT + 64, len(SECOND))}))"
    f"  (else (i64.const {packed(DATA_AT, len(FIRST))})))",
    extra="(table $t 2 funcref)", data=FIRST.ljust(64, b"\0") + SECOND)


def test_every_new_instance_refuses_a_table_grown_over_table_elements(
        runtime: Runtime, path: str) -> None:
    capped = load_wat(runtime, TABLE_GROW, plugin_id="capped", limits={"table_elements": 50})
    roomy = load_wat(runtime, TABLE_GROW, plugin_id="roomy")
    for _ in range(3):
        assert capped.new_instance().call("test", None).value == "second"
        assert roomy.new_instance().call("test", None).value == "first"


def test_limits_past_32_bits_reach_every_store_whole(runtime: Runtime, path: str) -> None:
    """The store's limits go to wasmtime as 64-bit values: cut to 32 bits, these caps
    would be 8 pages and 50 elements, and the grows below would be refused."""
    limits = {"memory_bytes": 2**32 + 8 * 65536, "table_elements": 2**32 + 50}
    memory = load_wat(runtime, GROW, plugin_id="memory", limits=limits)
    table = load_wat(runtime, TABLE_GROW, plugin_id="table", limits=limits)
    for _ in range(2):
        assert memory.new_instance().call("test", None).value == "first"
        assert table.new_instance().call("test", None).value == "first"


def test_a_module_without_a_start_function_still_traps_on_its_data_segment(
        runtime: Runtime, path: str, healthy: Plugin) -> None:
    """Instantiating a module without a start function opens no call-tree frame, yet
    an out-of-bounds data segment is still the trap it is, named after instantiate
    (not a spent fuel or a passed deadline), every time."""
    from wasmext import GuestTrap

    assert not load_wat(runtime, ONCE, plugin_id="plain").module.info.has_start
    assert load_wat(runtime, _with_start("(nop)"), plugin_id="started").module.info.has_start
    wat = guest_wat(extra='(data (i32.const 655360) "x")')
    for _ in range(3):
        with pytest.raises(GuestTrap, match=r"instantiate: .*out of bounds memory access"):
            load_wat(runtime, wat, plugin_id="outside")
    assert healthy.call("test").value == "alive"


def test_a_start_function_that_spins_is_out_of_fuel_naming_instantiate(
        runtime: Runtime, path: str) -> None:
    plugin = load_wat(runtime, ONCE, plugin_id="fine")  # the same runtime keeps serving
    for _ in range(3):
        with pytest.raises(OutOfFuel, match="instantiate"):
            load_wat(runtime, _with_start("(loop (br 0))"), plugin_id="spin",
                     limits={"fuel_per_call": 10_000})
    assert plugin.new_instance().call("test", None).value == "first"


def test_a_settings_change_reaches_the_next_registration_request(
        runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The packed registration request is reused only while the settings, the
    sensitive names and the id it was made of are the same, nested values included."""
    from wasmext.sandbox.instance import PluginInstance

    module = load_wat(runtime, ONCE, plugin_id="code").module
    plugin = Plugin(module, plugin_id="settings", settings={"names": ["a"], "token": "hidden"},
                    sensitive=frozenset({"token"}))
    sent: list[dict[str, object]] = []
    start = PluginInstance.start

    def spy(self: PluginInstance, request: dict[str, object] | bytes) -> dict[str, object]:
        sent.append(request if isinstance(request, dict) else msgpack.unpackb(request))
        return start(self, request)

    monkeypatch.setattr(PluginInstance, "start", spy)
    plugin.new_instance()
    plugin.settings["names"].append("b")  # changed in place, one level down
    plugin.new_instance()
    plugin.settings["greeting"] = "hi"
    plugin.new_instance()
    plugin.new_instance()
    assert [r["settings"] for r in sent] == [
        {"names": ["a"]}, {"names": ["a", "b"]}, {"names": ["a", "b"], "greeting": "hi"},
        {"names": ["a", "b"], "greeting": "hi"}]
    assert all(r == plugin.register_request() for r in sent[2:])
    assert all("hidden" not in repr(r) for r in sent)


def test_a_dropped_store_is_closed_once_and_refuses_use(runtime: Runtime) -> None:
    engine = load_wat(runtime, guest_wat(), plugin_id="closing").module.engine
    store = fastcall.new_store(engine.engine, engine.handle)
    assert isinstance(store, wasmtime.Store)
    store.set_epoch_deadline(5)
    store.close()
    store.close()  # a second close (and the collector's later) deletes nothing
    with pytest.raises(ValueError, match="closed"):
        store.get_fuel()
    with pytest.raises(ValueError, match="closed"):
        store.set_epoch_deadline(1)


def test_initialize_runs_in_every_instance_under_a_budget_of_its_own(
        runtime: Runtime, path: str) -> None:
    flagged = load_wat(runtime, guest_wat(
        ONCE_BODY, data=FIRST.ljust(64, b"\0") + SECOND,
        extra='(global $seen (mut i32) (i32.const 0)) '
              '(func (export "_initialize") (global.set $seen (i32.const 1)))'),
        plugin_id="init")
    for _ in range(3):  # each instance's _initialize set its own flag
        assert flagged.new_instance().call("test", None).value == "second"
    spin = guest_wat(extra='(func (export "_initialize") (loop (br 0)))')
    for _ in range(2):
        with pytest.raises(OutOfFuel, match="_initialize"):
            load_wat(runtime, spin, plugin_id="spin-init", limits={"fuel_per_call": 10_000})
    started = time.monotonic()
    with pytest.raises(Timeout):
        load_wat(runtime, spin, plugin_id="slow-init",
                 limits={"fuel_per_call": 10**12, "timeout_ms": 300})
    assert time.monotonic() - started < 3
