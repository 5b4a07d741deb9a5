"""A hostile plugin against the instance pool (sandbox.engine): whatever way it fails,
and however long the host or the application keeps the error, its instances give their
slots back, so a healthy plugin still gets one; and what it leaves in a slot is gone
for the next instance."""

from __future__ import annotations

import dataclasses
import gc
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime

from wasmext import Host, Runtime
from wasmext.config import HostConfig, parse_config
from wasmext.errors import (
    AbiMismatch,
    Cancelled,
    GuestTrap,
    HostCallLimitExceeded,
    InstancePoolFull,
    InvalidOutput,
    MemoryLimitExceeded,
    OutOfFuel,
    PluginError,
    StackOverflow,
    StateUnavailable,
    Timeout,
    UnknownHook,
    WasmextError,
)
from wasmext.lifecycle.reload import rescan
from wasmext.sandbox import fastcall
from wasmext.sandbox import plugin as sandbox_plugin
from wasmext.sandbox.callscope import CallScope
from wasmext.sandbox.engine import EngineConfig
from wasmext.sandbox.hostcalls import CallContext, OpError
from wasmext.sandbox.module import PluginModule
from wasmext.sandbox.plugin import Plugin, QuarantinePolicy
from wasmext.testing import DATA_AT, guest_wat, host_calls_wat, load_wat, make_host, packed

ALIVE = {"ok": True, "value": "alive"}
SPIN = "(loop (br 0)) (i64.const 0)"
# Each attack: the guest, its limits, and the error it must end with.
CALL_ATTACKS: dict[str, tuple[str, dict[str, int], type[WasmextError]]] = {
    "trap": (guest_wat("(unreachable)"), {}, GuestTrap),
    "out of fuel": (guest_wat(SPIN), {"fuel_per_call": 200_000}, OutOfFuel),
    "timeout": (guest_wat(SPIN), {"fuel_per_call": 10**12, "timeout_ms": 30}, Timeout),
    "memory cap": (guest_wat("(loop (br_if 0 (i32.ne (memory.grow (i32.const 1)) "
                             "(i32.const -1)))) (unreachable)"),
                   {"memory_bytes": 2 * 2**20}, MemoryLimitExceeded),
    "stack overflow": (guest_wat("(call $deeper) (i64.const 0)",
                                 extra="(func $deeper (call $deeper))"), {}, StackOverflow),
    "invalid output": (guest_wat(response=[1, 2]), {}, InvalidOutput),
    "host call limit": (host_calls_wat(*[{"op": "log", "level": "info", "msg": "x"}] * 8,
                                       then="(unreachable)"),
                        {"max_host_calls": 4}, HostCallLimitExceeded),
    "guest error": (guest_wat(response={"ok": False, "error": {"code": "no", "message": "no"}}),
                    {}, PluginError),
}
LOAD_ATTACKS: dict[str, tuple[str, type[WasmextError]]] = {
    "start function": (guest_wat(extra="(func $boom unreachable) (start $boom)"), GuestTrap),
    "_initialize": (guest_wat(extra='(func (export "_initialize") unreachable)'), GuestTrap),
    "registration output": (guest_wat(registration=[1]), InvalidOutput),
    "registration typo": (guest_wat(registration={"hooks": [{"hook": "on_plain_txt"}]}),
                          UnknownHook),
    "abi major": (guest_wat(abi_version=7), AbiMismatch),
}


def _pool_of_two() -> Runtime:
    """A runtime whose engine has two slots, and no quarantine in the way."""
    return Runtime(cache=False, engine=EngineConfig(instance_pool=2),
                   quarantine=QuarantinePolicy(max_faults=10**6))


def _every_slot_is_free(healthy: Plugin, slots: int) -> None:
    """The healthy plugin takes every slot of the pool at once (idle instances give
    theirs up): one that anything else still held makes the last InstancePoolFull."""
    held = [healthy.new_instance() for _ in range(slots)]
    assert [inst.call("test", None).value for inst in held] == ["alive"] * slots
    held.clear()
    assert healthy.call("test").value == "alive"


@pytest.mark.parametrize("attack", sorted(CALL_ATTACKS))
def test_a_kept_call_failure_holds_no_slot(attack: str, no_collector: None) -> None:
    # Plugin.last_fault keeps the last fault, an application the failures it was handed:
    # a trap's frames kept the store's bindings, and they the store (its memory and its
    # pool slot), so every faulting plugin held a slot for as long as its fault was kept.
    wat, limits, named = CALL_ATTACKS[attack]
    with _pool_of_two() as runtime:
        healthy = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="healthy")
        hostile = load_wat(runtime, wat, plugin_id="hostile", limits=limits)
        hostile.max_idle = 0  # each call's instance is dropped when the call ends
        kept: list[WasmextError] = []
        for _ in range(6):
            started = time.monotonic()
            with pytest.raises(named) as caught:
                hostile.call("test")
            assert time.monotonic() - started < 5
            assert "instance_pool" not in str(caught.value)
            kept.append(caught.value)
        _every_slot_is_free(healthy, 2)


def test_a_kept_cancelled_call_holds_no_slot(no_collector: None) -> None:
    # A caller that gives up (an MCP cancel, a worker's caller) ends the spinning call
    # as Cancelled, from another thread; kept, it holds no slot either.
    with _pool_of_two() as runtime:
        healthy = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="healthy")
        spinner = load_wat(runtime, guest_wat(SPIN), plugin_id="spinner",
                           limits={"fuel_per_call": 10**13, "timeout_ms": 10_000})
        spinner.max_idle = 0  # each call's instance is dropped when the call ends
        kept: list[WasmextError] = []
        for _ in range(4):
            scope = CallScope()
            threading.Timer(0.05, scope.cancel).start()
            started = time.monotonic()
            with pytest.raises(Cancelled) as caught, scope.bound():
                spinner.call("test")
            assert time.monotonic() - started < 3
            kept.append(caught.value)
        assert not spinner.faults
        _every_slot_is_free(healthy, 2)


@pytest.mark.parametrize("attack", sorted(LOAD_ATTACKS))
def test_a_kept_load_error_holds_no_slot(attack: str, no_collector: None) -> None:
    # Host.load_errors keeps up to a thousand load errors: a registration refused as
    # UnknownHook or AbiMismatch (no PluginFault) kept its instance in the error's frames.
    wat, named = LOAD_ATTACKS[attack]
    with _pool_of_two() as runtime:
        healthy = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="healthy")
        kept: list[WasmextError] = []
        for n in range(6):
            started = time.monotonic()
            with pytest.raises(named) as caught:
                load_wat(runtime, wat, plugin_id=f"hostile-{n}")
            assert time.monotonic() - started < 5
            kept.append(caught.value)
        _every_slot_is_free(healthy, 2)


def test_hot_reloads_that_fail_registration_leave_the_pool_to_the_good_ones(
        tmp_path: Path, no_collector: None) -> None:
    # Every other version of the plugin names a hook one typo off (UnknownHook): each
    # failed reload joined Host.load_errors with its instance, until the pool of four
    # was full and even the good versions failed to load.
    folder = tmp_path / "plugins" / "churn"
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text('id = "churn"\nversion = "1.0.0"\nabi = 1\n')

    def version(n: int, typo: bool) -> None:
        hook = "on_plain_txt" if typo else "test"
        (folder / "churn.wasm").write_bytes(bytes(wasmtime.wat2wasm(guest_wat(
            response={"ok": True, "value": f"v{n}"},
            registration={"hooks": [{"hook": hook}], "name": f"v{n}"}))))

    version(0, typo=False)
    config = dataclasses.replace(parse_config({"host": {"instance_pool": 4}}),
                                 data_dir=tmp_path / "data", state_backend="memory")
    with Host(config, plugin_dirs=[("workspace", folder.parent)]) as host:
        for n in range(1, 13):
            version(n, typo=n % 2 == 0)
            report = rescan(host)
            if n % 2 == 0:
                assert [type(e) for e in report.errors] == [UnknownHook]
            else:
                assert not report.errors, report.errors
            result, why = host.try_call("churn", "test", None)
            assert why is None and result is not None
            assert result.value == f"v{n if n % 2 else n - 1}"  # a failed reload: the last
        assert len(host.load_errors) == 6


def test_a_storage_outage_kept_as_errors_holds_no_slot(tmp_path: Path,
                                                      no_collector: None) -> None:
    # The state file locked past each call's deadline: every call is StateUnavailable,
    # the host's trouble. The error was the one the state op caught inside the host call,
    # and its frames led up to the instance that made the call: an application keeping
    # them (or the instance's own context keeping the last) kept every instance's slot,
    # and when storage came back the pool was full.
    config = HostConfig(data_dir=tmp_path, state_backend="sqlite", instance_pool=3)
    writes = host_calls_wat({"op": "state.set", "key": "k", "value": 1, "scope": "plugin"})
    with make_host((guest_wat(response=ALIVE), {"plugin_id": "healthy"}),
                   (writes, {"plugin_id": "writer", "grants": ["state"],
                             "limits": {"timeout_ms": 300}}), config=config) as host:
        writer = host.plugins["writer"].plugin
        assert writer.call("test", None, {"session": "s"}).value is None  # opens the file
        writer.max_idle = 0  # each call's instance is dropped when the call ends
        kept: list[WasmextError] = []
        lock = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
        try:
            lock.execute("BEGIN EXCLUSIVE")
            for _ in range(3):
                started = time.monotonic()
                with pytest.raises(StateUnavailable) as caught:
                    writer.call("test", None, {"session": "s"})
                assert time.monotonic() - started < 3
                kept.append(caught.value)
            lock.execute("ROLLBACK")
        finally:
            lock.close()
        assert not writer.faults and not writer.quarantined
        healthy = host.plugins["healthy"].plugin
        assert isinstance(healthy, Plugin)
        _every_slot_is_free(healthy, 3)
        assert writer.call("test", None, {"session": "s"}).value is None  # storage is back


@pytest.mark.parametrize("then", ["answer", "trap"])
def test_storage_trouble_met_inside_a_call_holds_no_slot(then: str,
                                                         no_collector: None) -> None:
    # An op whose storage fails notes the host's trouble in the call's context, as the
    # state ops do, and the call ends as StateUnavailable whether the guest passes the
    # op's answer on or traps: the noted error's frames led up to the instance (which
    # kept it in its context: a cycle), so every such call kept a slot.
    def storage(ctx: CallContext, req: dict[str, Any]) -> Any:
        try:
            raise StateUnavailable("the storage is down", plugin_id=ctx.plugin_id)
        except StateUnavailable as err:
            ctx.host_fault = ctx.host_fault or err
            raise OpError("unavailable", "storage is unavailable") from None

    guest = host_calls_wat({"op": "x.storage"}, then="(unreachable)" if then == "trap" else "")
    with _pool_of_two() as runtime:
        runtime.services.register("x.storage", storage, capability="")
        healthy = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="healthy")
        stored = load_wat(runtime, guest, plugin_id="stored")
        stored.max_idle = 0  # each call's instance is dropped when the call ends
        kept: list[WasmextError] = []
        for _ in range(4):
            with pytest.raises(StateUnavailable, match="the storage is down") as caught:
                stored.call("test")
            kept.append(caught.value)
        assert not stored.faults and not stored.quarantined
        _every_slot_is_free(healthy, 2)


def test_failed_reloads_kept_as_load_errors_keep_no_module_or_instance(
        tmp_path: Path) -> None:
    # Host.load_errors keeps up to a thousand errors: each kept the frames of the load
    # that failed, and with them the plugin, its compiled module and the module's bytes
    # (a plugin whose every new version fails its registration grew the host by its code
    # size per reload, gigabytes over a thousand).
    folder = tmp_path / "plugins" / "churn"
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text('id = "churn"\nversion = "1.0.0"\nabi = 1\n')
    config = dataclasses.replace(parse_config({}), data_dir=tmp_path / "data",
                                 state_backend="memory")

    def modules() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is PluginModule)

    def version(n: int) -> None:
        (folder / "churn.wasm").write_bytes(bytes(wasmtime.wat2wasm(guest_wat(
            registration={"hooks": [{"hook": "on_plain_txt"}], "name": f"v{n}"}))))

    version(0)
    with Host(config, plugin_dirs=[("workspace", folder.parent)]) as host:
        before = modules()
        for n in range(1, 9):
            version(n)
            rescan(host)
        assert len(host.load_errors) == 9
        assert all(isinstance(e, UnknownHook) for e in host.load_errors)
        assert "on_plain_txt" in host.load_errors[-1].describe()
        assert modules() - before <= 1, "each failed load's module is still alive"


def test_wasmtime_pys_own_calls_keep_no_slot_either(monkeypatch: pytest.MonkeyPatch,
                                                    no_collector: None) -> None:
    # Where the raw entries are not trusted (another wasmtime), exports are called through
    # wasmtime-py: the caller it makes keeps no store either.
    monkeypatch.setattr(fastcall, "_RAW", None)
    with _pool_of_two() as runtime:
        healthy = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="healthy")
        hostile = load_wat(runtime, guest_wat("(unreachable)"), plugin_id="hostile")
        kept: list[WasmextError] = []
        for _ in range(4):
            with pytest.raises(GuestTrap) as caught:
                hostile.call("test")
            kept.append(caught.value)
        _every_slot_is_free(healthy, 2)


def test_an_instance_that_used_its_folder_grant_gives_its_slot_back(
        tmp_path: Path, no_collector: None) -> None:
    # The instance's open files (FsTable) called back into the instance: a cycle, so an
    # instance that made one file call (a WASI libc asks for its preopens at start) kept
    # its store and slot after it was dropped until a collection, and for good without.
    prestat = ('(import "wasi_snapshot_preview1" "fd_prestat_get" '
               '(func $prestat (param i32 i32) (result i32)))')
    with _pool_of_two() as runtime:
        healthy = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="healthy")
        files = load_wat(runtime, guest_wat(
            "(drop (call $prestat (i32.const 3) (i32.const 60000))) (i64.const 0)",
            imports=prestat), plugin_id="files", grants=[f"fs:{tmp_path}"])
        files.max_idle = 0  # each call's instance is dropped when the call ends
        for _ in range(6):
            assert files.call("test", "kept").value == "kept"
        _every_slot_is_free(healthy, 2)


def test_each_faulting_plugin_keeps_no_slot_with_its_last_fault(no_collector: None) -> None:
    # Plugin.last_fault is kept until the plugin's next fault: five plugins that each
    # faulted once held five slots (and their memories) of a pool of six.
    with Runtime(cache=False, engine=EngineConfig(instance_pool=6),
                 quarantine=QuarantinePolicy(max_faults=10**6)) as runtime:
        healthy = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="healthy")
        faulty = [load_wat(runtime, guest_wat("(unreachable)"), plugin_id=f"faulty-{n}")
                  for n in range(5)]
        for plugin in faulty:
            with pytest.raises(GuestTrap) as caught:
                plugin.call("test")
            last = plugin.last_fault
            assert isinstance(last, GuestTrap) and last.__traceback__ is None
            assert (last.message, last.plugin_id) == (caught.value.message, plugin.id)
        held = [healthy.new_instance() for _ in range(6)]  # every slot of the six
        assert [inst.call("test", None).value for inst in held] == ["alive"] * 6
        with pytest.raises(InstancePoolFull):
            healthy.new_instance()


def test_a_module_with_four_tables_takes_one_slot_not_four(healthy: Plugin) -> None:
    # Each slot has room for a module's four tables, but the pool held only as many
    # tables as slots: an instance of a four-table module took four slots' tables, so a
    # plugin shaped so held four times its share of the pool (with a pool of two, it
    # could not even load).
    four = guest_wat(extra=" ".join(f"(table $t{n} 1 funcref)" for n in range(4)))
    with Runtime(cache=False, engine=EngineConfig(instance_pool=2)) as runtime:
        tables = load_wat(runtime, four, plugin_id="tables")
        held = [tables.new_instance() for _ in range(2)]  # its idle one gives way
        assert [inst.call("test", None).value for inst in held] == ["ok"] * 2
        started = time.monotonic()
        with pytest.raises(InstancePoolFull, match="instance_pool"):
            tables.new_instance()
        assert time.monotonic() - started < 2
        held.pop()
        assert tables.call("test").value == "ok"
    assert healthy.call("test", 1).value == "alive"


def test_a_module_that_throws_takes_a_second_memory_and_a_full_pool_is_named(
        healthy: Plugin) -> None:
    # Exceptions (and GC types) need a GC heap, and wasmtime takes it from the pool's
    # memories: such an instance takes two of the pool's memories. The pool then holds
    # half as many of them; once full, the next is InstancePoolFull, at instantiation
    # (never a fault mid-call), and the plugin is not blamed.
    throws = guest_wat("(block $h (result i32) (try_table (catch $e $h) (throw $e "
                       "(i32.const 1))) (i32.const 0)) (drop) (i64.const 0)",
                       extra="(tag $e (param i32))")
    with Runtime(cache=False, engine=EngineConfig(instance_pool=4)) as runtime:
        thrower = load_wat(runtime, throws, plugin_id="thrower")
        assert thrower.call("test").changed is False  # it threw and caught
        first, second = thrower.new_instance(), thrower.new_instance()  # four memories
        for _ in range(3):
            started = time.monotonic()
            with pytest.raises(InstancePoolFull, match="memor"):
                thrower.new_instance()
            assert time.monotonic() - started < 2
        assert not thrower.faults and not thrower.quarantined
        assert second.call("test", None).changed is False
        del first, second
        plain = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="plain")
        assert plain.call("test").value == "alive"
    assert healthy.call("test", 1).value == "alive"


def test_idle_instances_of_one_plugin_give_way_to_another_plugins_call() -> None:
    # Each plugin keeps up to max_idle instances for its next call, and each holds a slot:
    # a plugin called four at a time once (its hooks made concurrent by the host's load,
    # events or agent runs it asked for) kept four slots idle for good, and with the pool
    # full of them every other plugin's call was InstancePoolFull. Now idle instances give
    # their slots to a call that needs one; instances in use never do.
    with Runtime(cache=False, engine=EngineConfig(instance_pool=4)) as runtime:
        hog = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="hog")
        burst = [hog.new_instance() for _ in range(3)]  # with its first: all four slots
        for inst in burst:
            hog._release(inst)
        del inst
        burst.clear()
        assert len(hog._idle) == 4
        other = load_wat(runtime, guest_wat(response={"ok": True, "value": "served"}),
                         plugin_id="other")
        assert not hog._idle  # its four idle instances gave way to the load
        assert other.call("test").value == "served"
        busy = [other.new_instance() for _ in range(4)]  # its own idle one gives way too
        started = time.monotonic()
        with pytest.raises(InstancePoolFull):  # all four in use: none gives way
            hog.call("test")
        assert time.monotonic() - started < 2
        busy.pop()
        assert hog.call("test").value == "alive"


TOOL_REGISTRATION = {"hooks": [{"hook": "on_tool"}], "name": "callee",
                     "tools": [{"name": "boom", "description": "traps",
                                "input_schema": {"type": "object"}}]}


def test_a_callee_faults_last_fault_keeps_none_of_its_callers_instances(
        tmp_path: Path, no_collector: None) -> None:
    # A plugin whose tool faults keeps that fault as its last: the fault's frames led up
    # (f_back) through the calling plugin's host call into the caller's instance, which
    # kept its slot after the caller dropped it, until the callee's next fault.
    caller = host_calls_wat({"op": "tool.call", "name": "callee__boom", "args": {}})
    config = HostConfig(data_dir=tmp_path, state_backend="memory", instance_pool=3)
    with make_host((guest_wat(response=ALIVE), {"plugin_id": "healthy"}),
                   (guest_wat("(unreachable)", registration=TOOL_REGISTRATION),
                    {"plugin_id": "callee"}),
                   (caller, {"plugin_id": "caller", "grants": ["tools", "tool:callee__*"]}),
                   config=config) as host:
        host.plugins["callee"].plugin.close()
        calling = host.plugins["caller"].plugin
        calling.max_idle = 0  # its instance is dropped when its call ends
        calling.close()
        started = time.monotonic()
        result, why = host.try_call("caller", "test", None)
        assert why is None and result is not None
        assert result.value["status"] == "error"  # the tool trapped: an answer, no fault
        assert time.monotonic() - started < 5
        assert host.plugins["callee"].plugin.last_fault is not None
        assert not calling.faults
        healthy = host.plugins["healthy"].plugin
        assert isinstance(healthy, Plugin)
        _every_slot_is_free(healthy, 3)


YES, NO = msgpack.packb({"ok": True, "value": "clean"}), msgpack.packb({"ok": True,
                                                                      "value": "dirty"})
VERDICT_DATA = YES.ljust(64, b"\0") + NO
GROWN_END = 40 * 65536


def _verdict(clean: str) -> str:
    """A hook body's end: "clean" when the i32 expression `clean` is true, else "dirty"."""
    return (f"(if (result i64) {clean} (then (i64.const {packed(DATA_AT, len(YES))}))"
            f" (else (i64.const {packed(DATA_AT + 64, len(NO))})))")


def test_a_module_declaring_more_memory_finds_nothing_another_grew_into() -> None:
    # One slot. The first module grows from 2 to 40 pages and writes into every 4 KiB
    # of it; the second declares 40 pages and finds them all zero (past the request the
    # host wrote at the heap's start, in the second page).
    write = f"""(local $at i32) (drop (memory.grow (i32.const 38)))
      (local.set $at (i32.const 131072))
      (loop (i32.store (local.get $at) (i32.const 0x53454352))
            (local.set $at (i32.add (local.get $at) (i32.const 4096)))
            (br_if 0 (i32.lt_u (local.get $at) (i32.const {GROWN_END}))))
      (i64.const 0)"""
    read = f"""(local $at i32) (local $seen i32) (local.set $at (i32.const 131072))
      (loop (local.set $seen (i32.or (local.get $seen) (i32.load (local.get $at))))
            (local.set $at (i32.add (local.get $at) (i32.const 4096)))
            (br_if 0 (i32.lt_u (local.get $at) (i32.const {GROWN_END}))))
      {_verdict("(i32.eqz (local.get $seen))")}"""
    with Runtime(cache=False, engine=EngineConfig(instance_pool=1)) as runtime:
        writer = load_wat(runtime, guest_wat(write), plugin_id="writer")
        assert writer.call("test").changed is False
        writer.close()
        reader = load_wat(runtime, guest_wat(read, memory_pages=40, data=VERDICT_DATA),
                          plugin_id="reader")
        assert reader.call("test").value == "clean"


def test_dropped_segments_and_a_half_made_instance_leave_nothing_in_the_slot() -> None:
    # data.drop and elem.drop are the instance's, not the slot's: each new instance in
    # the one slot may use its passive segments again. A start-up that wrote an active
    # segment and then trapped on the next leaves nothing for the module after it.
    passive = guest_wat(
        "(memory.init $p (i32.const 200000) (i32.const 0) (i32.const 4)) (data.drop $p)"
        "(table.init $t $e (i32.const 0) (i32.const 0) (i32.const 1)) (elem.drop $e)"
        + _verdict("(i32.and (i32.eq (i32.load (i32.const 200000)) (i32.const 0x41414141))"
                   " (i32.eqz (ref.is_null (table.get $t (i32.const 0)))))"),
        memory_pages=4, data=VERDICT_DATA,
        extra='(data $p "AAAA") (table $t 2 funcref) (func $f) (elem $e func $f)')
    half = guest_wat(memory_pages=3, extra='(data (i32.const 150000) "SECR") '
                                           '(data (i32.const 196606) "XXXXXXXX")')
    after = guest_wat(_verdict("(i32.eqz (i32.load (i32.const 150000)))"), memory_pages=3,
                      data=VERDICT_DATA)
    with Runtime(cache=False, engine=EngineConfig(instance_pool=1)) as runtime:
        plugin = load_wat(runtime, passive, plugin_id="passive")
        assert plugin.call("test").value == "clean"
        with pytest.raises(GuestTrap):  # the same instance: its segments are dropped
            plugin.call("test")
        for _ in range(3):
            assert plugin.new_instance().call("test", None).value == "clean"
        plugin.close()
        with pytest.raises(GuestTrap, match="out of bounds"):
            load_wat(runtime, half, plugin_id="half")
        assert load_wat(runtime, after, plugin_id="after").call("test").value == "clean"


def test_table_entries_another_module_grew_and_filled_are_gone() -> None:
    # One slot. The first module grows its table to 5,001 entries and fills them with a
    # function of its own; the next declares 5,001 entries and finds every one empty,
    # and an indirect call through one traps instead of reaching the dead instance.
    fill = guest_wat("(drop (table.grow $t (ref.func $f) (i32.const 5000)))"
                     " (table.fill $t (i32.const 0) (ref.func $f) (i32.const 5001))"
                     " (i64.const 0)",
                     extra="(table $t 1 funcref) (func $f) (elem declare func $f)")
    look = guest_wat(
        "(local $at i32) (local $seen i32)"
        " (loop (local.set $seen (i32.or (local.get $seen)"
        " (i32.eqz (ref.is_null (table.get $t (local.get $at))))))"
        " (local.set $at (i32.add (local.get $at) (i32.const 1)))"
        " (br_if 0 (i32.lt_u (local.get $at) (i32.const 5001))))"
        + _verdict("(i32.eqz (local.get $seen))"),
        data=VERDICT_DATA, extra="(table $t 5001 funcref)")
    jump = guest_wat("(call_indirect $t (i32.const 3)) (i64.const 0)",
                     extra="(table $t 5001 funcref)")
    with Runtime(cache=False, engine=EngineConfig(instance_pool=1)) as runtime:
        filler = load_wat(runtime, fill, plugin_id="filler")
        assert filler.call("test").changed is False
        filler.close()
        looker = load_wat(runtime, look, plugin_id="looker")
        assert looker.call("test").value == "clean"
        looker.close()
        with pytest.raises(GuestTrap, match="uninitialized element"):
            load_wat(runtime, jump, plugin_id="jump").call("test")


def test_two_plugins_of_one_module_share_nothing_through_the_slot() -> None:
    # The same bytes loaded as two plugins share one compiled module, and a slot goes
    # back to its module first: the second plugin's instance is where the first's was.
    # It finds memory at its first size, and nothing at the addresses the first wrote
    # (inside the resident 128 KiB and past it, after a grow).
    body = ("(local $fresh i32)"
            " (local.set $fresh (i32.and (i32.eq (memory.size) (i32.const 3))"
            " (i32.eqz (i32.load (i32.const 100000)))))"
            " (drop (memory.grow (i32.const 4)))"
            " (i32.store (i32.const 100000) (i32.const 0x53454352))"
            " (i32.store (i32.const 300000) (i32.const 0x53454352))"
            + _verdict("(local.get $fresh)"))
    wasm = bytes(wasmtime.wat2wasm(guest_wat(body, memory_pages=3, data=VERDICT_DATA)))
    with Runtime(cache=False, engine=EngineConfig(instance_pool=1)) as runtime:
        first = runtime.load(wasm, plugin_id="tenant-a", settings={"token": "a-secret"})
        assert first.call("test").value == "clean"
        assert first.call("test").value == "dirty"  # its own instance keeps its writes
        first.close()
        second = runtime.load(wasm, plugin_id="tenant-b")
        assert second.module.module is first.module.module  # one compiled module
        assert second.call("test").value == "clean"


def test_a_full_pool_is_logged_for_the_operator_without_a_flood(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # The operator learns the pool is full from the log (an MCP client or a worker's
    # caller is told, the server's log said nothing): one warning naming the setting,
    # then at most one per interval with how many were refused since, whatever the rate.
    notes = sandbox_plugin._PoolFullNotes  # as if no pool had been full in this process
    monkeypatch.setattr(notes, "said_at", None)
    monkeypatch.setattr(notes, "refused", 0)
    with Runtime(cache=False, engine=EngineConfig(instance_pool=1)) as runtime:
        plugin = load_wat(runtime, guest_wat(response=ALIVE), plugin_id="crowded")
        held = plugin.new_instance()  # its idle one gives way: the slot is in use
        with caplog.at_level(logging.WARNING, logger="wasmext.sandbox.plugin"):
            for _ in range(200):
                with pytest.raises(InstancePoolFull):
                    plugin.new_instance()
            first = [r.getMessage() for r in caplog.records]
            monkeypatch.setattr(sandbox_plugin, "POOL_FULL_LOG_EVERY_S", 0.0)
            with pytest.raises(InstancePoolFull):
                plugin.new_instance()
            later = [r.getMessage() for r in caplog.records][len(first):]
    assert len(first) == 1, first
    assert "instance pool full" in first[0] and "[host] instance_pool (1)" in first[0]
    assert "crowded" in first[0]
    assert len(later) == 1 and "200 instances refused" in later[0], later
    assert held.call("test", None).value == "alive"

