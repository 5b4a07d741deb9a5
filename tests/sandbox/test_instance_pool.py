"""Core-module instances come from wasmtime's pooling allocator (sandbox.engine): a slot
an instance leaves is reset before the next takes it, a full pool is the host's named
limit and never the plugin's fault, and an engine that cannot reserve the pool's
address space maps each instance as before."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgpack
import pytest
import wasmtime

from wasmext import ConfigError, Host, Runtime, load_config
from wasmext.errors import GuestTrap, InstancePoolFull, MemoryLimitExceeded
from wasmext.sandbox.engine import EngineConfig, shared_engine
from wasmext.sandbox.plugin import Plugin, QuarantinePolicy
from wasmext.testing import DATA_AT, guest_wat, load_wat, packed

CLEAN = msgpack.packb({"ok": True, "value": "clean"})
DIRTY = msgpack.packb({"ok": True, "value": "dirty"})
PRISTINE = b"pristine"
# Offsets the first call writes to: a data segment's page (part of the module's image),
# the guest's heap inside the bytes a slot keeps resident, and a page it grows.
IMAGE_AT, RESIDENT_AT, GROWN_AT = DATA_AT + 128, 100_000, 5 * 65536 + 8
INITIAL_PAGES = 3

# The first call of an instance answers "clean" when it finds memory, its size, the
# table and the global as a fresh instance has them, then leaves all of them changed
# (a later call on the same instance answers "dirty": the check can fail).
REUSE_BODY = f"""
  (local $clean i32)
  (local.set $clean (i32.and
    (i32.and (i32.eq (memory.size) (i32.const {INITIAL_PAGES}))
             (i64.eq (i64.load (i32.const {IMAGE_AT}))
                     (i64.load (i32.const {DATA_AT + 256}))))
    (i32.and (i32.and (i32.eqz (i32.load (i32.const {RESIDENT_AT})))
                      (i32.eqz (global.get $planted)))
             (ref.is_null (table.get $t (i32.const 0))))))
  (drop (memory.grow (i32.const 4)))
  (i64.store (i32.const {IMAGE_AT}) (i64.const 0x5445524345530000))
  (i32.store (i32.const {RESIDENT_AT}) (i32.const 0x53454352))
  (i32.store (i32.const {GROWN_AT}) (i32.const 0x53454352))
  (global.set $planted (i32.const 1))
  (table.set $t (i32.const 0) (ref.func $marker))
  (if (result i64) (local.get $clean)
    (then (i64.const {packed(DATA_AT, len(CLEAN))}))
    (else (i64.const {packed(DATA_AT + 64, len(DIRTY))})))
"""
REUSE_DATA = (CLEAN.ljust(64, b"\0") + DIRTY).ljust(128, b"\0") \
    + PRISTINE.ljust(128, b"\0") + PRISTINE
REUSE_EXTRA = ("(global $planted (mut i32) (i32.const 0)) (table $t 4 funcref)"
               " (func $marker) (elem declare func $marker)")
REUSE = guest_wat(REUSE_BODY, memory_pages=INITIAL_PAGES, data=REUSE_DATA, extra=REUSE_EXTRA)


def test_an_instance_in_a_reused_slot_finds_nothing_of_the_last(runtime: Runtime) -> None:
    assert runtime.engine.pooled, "the default engine pools core-module instances"
    plugin = load_wat(runtime, REUSE, plugin_id="reuse")
    first = plugin.new_instance()
    assert first.call("test", None).value == "clean"
    assert first.call("test", None).value == "dirty"  # the same instance keeps its state
    assert first.memory.read(GROWN_AT, 4) == b"RCES"
    del first
    for _ in range(20):  # each takes the slot the last left (the pool keeps affinity)
        inst = plugin.new_instance()
        assert inst.memory.read(GROWN_AT, 4) is None  # memory is back to its first size
        assert inst.call("test", None).value == "clean"
        del inst
    assert plugin.call("test").value == "clean"


def test_another_module_in_the_slot_a_plugin_left_finds_nothing_of_it() -> None:
    # One slot: the second plugin's instance can only be where the first one's was.
    with Runtime(cache=False, engine=EngineConfig(instance_pool=1)) as runtime:
        first = load_wat(runtime, REUSE, plugin_id="first")
        assert first.call("test").value == "clean"
        assert first.call("test").value == "dirty"  # its idle instance, changed
        first.close()  # drops that instance: the slot is free
        other = guest_wat(REUSE_BODY, memory_pages=INITIAL_PAGES, hooks=("test", "other"),
                          data=REUSE_DATA, extra=REUSE_EXTRA)
        second = load_wat(runtime, other, plugin_id="second")
        assert second.module is not first.module
        assert second.call("test").value == "clean"
        assert second.call("test").value == "dirty"


def test_a_full_pool_is_the_hosts_limit_and_not_the_plugins_fault() -> None:
    with Runtime(cache=False, engine=EngineConfig(instance_pool=3)) as runtime:
        assert runtime.engine.pooled
        plugin = load_wat(runtime, guest_wat(response={"ok": True, "value": "alive"}),
                          plugin_id="crowded")  # its first instance, kept idle: one slot
        # The other two, and the idle one's: an idle instance gives its slot up.
        held = [plugin.new_instance() for _ in range(3)]
        assert not plugin._idle
        for _ in range(10):
            started = time.monotonic()
            with pytest.raises(InstancePoolFull) as caught:
                plugin.new_instance()
            assert time.monotonic() - started < 2
            assert "instance_pool" in str(caught.value)
            # It says what the operator can do about it, not only what happened.
            assert "raise it, or set it to 0" in str(caught.value)
            assert caught.value.plugin_id == "crowded"
        assert not plugin.quarantined  # ten refusals, none counted against the plugin
        assert held[0].call("test", None).value == "alive"  # its instances still answer
        held.pop()  # a slot comes free: a plugin loads into it
        healthy = load_wat(runtime, guest_wat(response={"ok": True, "value": "fine"}),
                           plugin_id="healthy")
        assert healthy.call("test").value == "fine"
        extra = healthy.new_instance()  # its idle instance gives way: all three in use
        with pytest.raises(InstancePoolFull):
            healthy.new_instance()
        assert extra.call("test", None).value == "fine"
        held.clear()
        assert healthy.new_instance().call("test", None).value == "fine"


def test_components_run_on_an_engine_without_the_pool(runtime: Runtime) -> None:
    components = runtime.engine.on_demand()
    assert not components.pooled and components.config.instance_pool == 0
    assert components is shared_engine(EngineConfig(instance_pool=0))
    assert components.fingerprint != runtime.engine.fingerprint  # own compiled code


def test_an_engine_without_the_address_space_maps_each_instance() -> None:
    # wasmtime aborts the process when it cannot reserve the pool: under an address-space
    # limit far below it, the engine must not ask, and plugins still run.
    script = textwrap.dedent("""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (48 << 30, 48 << 30))
        from wasmext import Runtime
        from wasmext.testing import guest_wat, load_wat
        with Runtime(cache=False) as runtime:
            plugin = load_wat(runtime, guest_wat(response={"ok": True, "value": "alive"}))
            answers = [plugin.new_instance().call("test", None).value for _ in range(3)]
            print(runtime.engine.pooled, plugin.call("test").value, answers)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split(None, 2) == ["False", "alive", "['alive', 'alive', 'alive']\n"]


@pytest.mark.parametrize("pool", [-1, 20_001, True, 1.5])
def test_the_pool_size_is_checked(pool: object) -> None:
    with pytest.raises(ValueError, match="instance_pool"):
        EngineConfig(instance_pool=pool)  # type: ignore[arg-type]


def test_a_host_with_a_full_pool_tells_the_app_and_blames_no_plugin(tmp_path: Path) -> None:
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ninstance_pool = 2\ndata_dir = "data"\n[state]\nbackend = "memory"\n')
    config = load_config(tmp_path / "wasmext.toml")
    assert config.instance_pool == 2
    with Host(config, plugin_dirs=[]) as host:
        assert host.runtime.engine.config.instance_pool == 2
        host.add(bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "up"}))),
                 plugin_id="busy")
        plugin = host.plugins["busy"].plugin
        assert isinstance(plugin, Plugin)
        plugin.close()  # its idle instance goes: the call below must start one
        held = [plugin.new_instance() for _ in range(2)]
        with host.session() as s:
            with pytest.raises(InstancePoolFull):
                host.try_call("busy", "test", None, s)
            failed = [e.detail or "" for e in s.trace.events if e.outcome == "failed"]
        assert failed and failed[0].startswith("instance pool full: no free instance slot")
        assert not host.faults and not plugin.quarantined
        held.pop()
        result, reason = host.try_call("busy", "test", None)
        assert reason is None and result is not None and result.value == "up"


@pytest.mark.parametrize("text", ["instance_pool = -1", "instance_pool = 20001",
                                  'instance_pool = "10"', "instance_pool = 1.5"])
def test_the_config_refuses_a_pool_size_out_of_range(tmp_path: Path, text: str) -> None:
    (tmp_path / "wasmext.toml").write_text(f"[host]\n{text}\n")
    with pytest.raises(ConfigError, match="instance_pool"):
        load_config(tmp_path / "wasmext.toml")


def test_tables_no_slot_holds_are_refused_before_compiling(runtime: Runtime,
                                                           healthy: Plugin) -> None:
    five = guest_wat(extra=" ".join(f"(table $t{n} 1 funcref)" for n in range(5)))
    with pytest.raises(MemoryLimitExceeded, match="declares 5 tables"):
        load_wat(runtime, five, plugin_id="five")
    wide = guest_wat(extra="(table 1000001 funcref)")
    with pytest.raises(MemoryLimitExceeded, match="table_elements 1000000"):
        load_wat(runtime, wide, plugin_id="wide")
    four = guest_wat(extra=" ".join(f"(table $t{n} 1 funcref)" for n in range(4)))
    assert load_wat(runtime, four, plugin_id="four").call("test").value == "ok"
    assert healthy.call("test", 1).value == "alive"


@pytest.mark.parametrize("where", ["call", "start"])
def test_faulted_instances_give_their_slot_back_without_the_collector(
        where: str, no_collector: None) -> None:
    # A fault's frames held the instance: with the collector off (as latency-minded
    # applications run), every fault kept a slot until the pool was full.
    trap = guest_wat("(unreachable)") if where == "call" else \
        guest_wat(extra="(func $boom unreachable) (start $boom)")
    with Runtime(cache=False, engine=EngineConfig(instance_pool=4),
                 quarantine=QuarantinePolicy(max_faults=10**6)) as runtime:
        healthy = load_wat(runtime, guest_wat(response={"ok": True, "value": "alive"}),
                           plugin_id="healthy-pool")
        if where == "call":
            faulty = load_wat(runtime, trap, plugin_id="faulty")
            for _ in range(40):
                with pytest.raises(GuestTrap):
                    faulty.call("test")
        else:
            for n in range(40):
                with pytest.raises(GuestTrap):
                    load_wat(runtime, trap, plugin_id=f"faulty-{n}")
        assert healthy.new_instance().call("test", None).value == "alive"


def test_an_agent_turn_the_pool_cannot_serve_is_aborted_and_the_next_turn_runs(
        tmp_path: Path) -> None:
    # `wasmext run` plays every turn: a full pool ends the turn it hit, with the way out
    # in its line, not the whole session (which lost every turn's trace and exited 1).
    from wasmext.agent import Agent
    from wasmext.models import ReplayModel, Transcript

    (tmp_path / "wasmext.toml").write_text(
        '[host]\ninstance_pool = 2\ndata_dir = "data"\n[state]\nbackend = "memory"\n')
    model = ReplayModel(Transcript({"model": "replay", "system": "s", "turns": [
        {"user": "one", "steps": [{"response": "first"}]},
        {"user": "two", "steps": [{"response": "second"}]}]}))
    with Host(load_config(tmp_path / "wasmext.toml"), plugin_dirs=[]) as host:
        host.add(bytes(wasmtime.wat2wasm(guest_wat(
            response={"ok": True, "value": "plain"},
            registration={"hooks": [{"hook": "on_plain_text"}]}))), plugin_id="plain")
        plugin = host.plugins["plain"].plugin
        assert isinstance(plugin, Plugin)
        plugin.close()  # its idle instance goes: the turn's call must start one
        held = [plugin.new_instance() for _ in range(2)]
        agent = Agent(host, model, tools={})
        with host.session() as s:
            full = agent.run_turn(s, 0, "one")
            assert full.finish_reason == "error" and full.aborted is not None
            assert "instance pool full" in full.aborted
            assert "raise it, or set it to 0" in full.aborted
            held.clear()
            after = agent.run_turn(s, 1, "two")
        assert after.aborted is None and after.response == "second"
        assert not host.faults and not plugin.quarantined
