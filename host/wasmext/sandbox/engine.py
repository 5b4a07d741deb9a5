"""The one shared wasmtime Engine and its epoch ticker.

Every plugin compiles against one Engine per distinct EngineConfig, so compiled
code is shared and the compile cache key is stable. Wall-clock deadlines use
epoch interruption: the engine's epoch advances every `TICK_MS` (sandbox.epoch: a
POSIX timer running wasmtime's increment without Python where the C library has one,
else a daemon thread), and each call sets its deadline in ticks.

Core modules' instances come from wasmtime's pooling allocator: the engine reserves
address space for `instance_pool` instances (each slot a 4 GiB memory with its guard,
and tables) once, and an instance takes a slot instead of mapping its memory and
unmapping it when dropped. A slot keeps its module's copy-on-write image mapped and
the first `KEEP_RESIDENT` bytes of memory resident (zeroed, not unmapped) for the
next instance of the same module: about half the cost of a fresh instance. wasmtime
resets a slot's memory and tables before it is used again. More instances alive at
once than the pool holds is `InstancePoolFull` (the host's limit, not the plugin's
fault). Components use an engine of their own that maps each instance's memory
(`SharedEngine.on_demand`). Where the reservation is refused (an address-space
limit, `ulimit -v`), the engine maps each instance on demand and says so in
`SharedEngine.pooled`.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import os
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TypeVar

import wasmtime

from wasmext._abi import DEFAULT_LIMITS
from wasmext.errors import MemoryLimitExceeded
from wasmext.sandbox.epoch import TICK_MS, Ticker, forget_timers, start_ticker
from wasmext.sandbox.fastcall import handle, wasmtime_version

__all__ = ["MAX_INSTANCE_POOL", "TICK_MS", "EngineConfig", "SharedEngine", "shared_engine"]

# Bytes of a slot's memory kept resident between instances, zeroed in place: the pages
# an instance of a small guest touches (its stack, the request, the registration).
KEEP_RESIDENT = 128 * 1024
# Named, not imported: wasmtime.component is loaded only where components are used.
_Compiled = TypeVar("_Compiled", "wasmtime.Module", "wasmtime.component.Component")
# A slot's tables: the host policy's ceiling (Runtime's default policy), and as many
# tables per module as the store limiter lets an instance have.
POOL_TABLE_ELEMENTS = 1_000_000
POOL_TABLES_PER_MODULE = 4
# What one slot reserves, with room to spare: a 4 GiB memory, its guard (32 MiB in
# wasmtime 50), and its tables (POOL_TABLE_ELEMENTS pointers each).
SLOT_BYTES = 4 * 2**30 + 128 * 2**20 + POOL_TABLES_PER_MODULE * POOL_TABLE_ELEMENTS * 8
# The most slots an engine reserves: 20,000 reserve about 85 TiB of the 128 TiB of a
# process's address space.
MAX_INSTANCE_POOL = 20_000
# Instance metadata: far over what a module wasmtime compiles needs; wasmtime's 1 MiB
# default is below a module with tens of thousands of exported functions.
POOL_MAX_INSTANCE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class EngineConfig:
    """Engine-wide settings; everything else is per plugin."""

    max_wasm_stack_bytes: int = DEFAULT_LIMITS["max_wasm_stack_bytes"]
    cranelift_opt_level: str = "speed"
    parallel_compilation: bool = True
    # Core-module instances alive at once in the pooling allocator (0: map each
    # instance's memory on demand). Each slot reserves about 4 GiB of address space,
    # not memory: 10,000 slots reserve about 40 TiB of the 128 TiB a process has.
    instance_pool: int = 10_000

    def __post_init__(self) -> None:
        pool = self.instance_pool
        if type(pool) is not int or not 0 <= pool <= MAX_INSTANCE_POOL:
            raise ValueError(f"instance_pool must be an int from 0 to {MAX_INSTANCE_POOL}, "
                             f"got {pool!r}")

    def fingerprint(self) -> str:
        """Stable text that changes whenever compiled code would differ."""
        doc = {"config": asdict(self), "wasmtime": wasmtime_version(), "fuel": True,
               "epochs": True, "memory_may_move": False, "memory64": False,
               "multi_memory": False}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()




class SharedEngine:
    """A wasmtime Engine configured for sandboxing, with its epoch ticker."""

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        # wasmtime aborts the process when the pool's reservation is refused (an
        # address-space limit): the same reservation is tried first, and given back.
        slots = self.config.instance_pool
        self.pooled = slots > 0 and _reservable(slots * SLOT_BYTES)
        self.engine = wasmtime.Engine(self._wasmtime_config(self.pooled))
        # Its wasm_engine_t, for the raw store entry (sandbox.fastcall): read once.
        self.handle = handle(ctypes.addressof(self.engine.ptr().contents))
        self.fingerprint = self.config.fingerprint()
        self._ticker: Ticker = start_ticker(self.engine)
        self._serial: wasmtime.Engine | None = None  # compiles in a forked child

    def compiler_settings(self) -> dict[str, bool | int | str]:
        """The `wasmtime.Config` attributes compiled code depends on, by name: an engine
        set up with them (a compiling child process, `sandbox.compiler`) writes code this
        engine loads."""
        return {
            "consume_fuel": True,
            "epoch_interruption": True,
            "max_wasm_stack": self.config.max_wasm_stack_bytes,
            "cranelift_opt_level": self.config.cranelift_opt_level,
            "parallel_compilation": self.config.parallel_compilation,
            # Threads and shared memory would let a guest outlive its call.
            "wasm_threads": False,
            "shared_memory": False,
            # The ABI is wasm32 with one memory (abi/SPEC.md 1), and the store limiter
            # caps each memory: several would multiply `memory_bytes`, a 64-bit one holds
            # pointers the host's i32 reads cannot reach. Components' core modules need
            # neither.
            "wasm_memory64": False,
            "wasm_multi_memory": False,
            "wasm_custom_page_sizes": False,
            # A fixed base address lets each instance read it once (fastcall.MemoryView).
            "memory_may_move": False,
        }

    def _wasmtime_config(self, pooled: bool) -> wasmtime.Config:
        cfg = wasmtime.Config()
        for name, value in self.compiler_settings().items():
            setattr(cfg, name, value)
        if pooled:
            _pooling(cfg, self.config.instance_pool)
        return cfg

    def check_tables(self, minimums: Sequence[int], name: str) -> None:
        """Refuse, before compiling, a module whose tables no slot of the pool holds
        (wasmtime would refuse to compile it, in words of its own), or more tables than
        the store limiter lets an instance have (without a pool: a compile for nothing,
        then a `GuestTrap` at every instantiation)."""
        if len(minimums) > POOL_TABLES_PER_MODULE:
            raise MemoryLimitExceeded(f"{name}: declares {len(minimums)} tables; an "
                                      f"instance may have {POOL_TABLES_PER_MODULE}")
        if not self.pooled:
            return
        for minimum in minimums:
            if minimum > POOL_TABLE_ELEMENTS:
                raise MemoryLimitExceeded(
                    f"{name}: declares a table of {minimum} elements, over table_elements "
                    f"{POOL_TABLE_ELEMENTS} (the most an instance slot holds)")

    def on_demand(self) -> SharedEngine:
        """This engine's settings without the pool: each instance maps its own memory.
        Components run there (a component's several core instances, memories and
        tables do not fit one slot's shape, and its start-up dwarfs what a slot
        saves), and a module built for Extism is compiled there to read its imports
        (Extism runs it; a slot's table bounds are not its business)."""
        if not self.config.instance_pool:
            return self
        return shared_engine(replace(self.config, instance_pool=0))

    def compile(self, wasm: bytes) -> wasmtime.Module:
        """`wasm` compiled for this engine (WasmtimeError when it does not compile)."""
        return self._compiled(wasmtime.Module, wasm)

    def compile_component(self, wasm: bytes) -> wasmtime.component.Component:
        """`compile` for a component."""
        from wasmtime import component as wc  # loaded where components are used

        return self._compiled(wc.Component, wasm)

    def _compiled(self, kind: type[_Compiled], wasm: bytes) -> _Compiled:
        """`kind` (a Module or a Component) of `wasm` for this engine: compiled here, or
        in a forked child on the calling thread (`_serial_compiler`) and loaded."""
        if not _forked or not self.config.parallel_compilation:
            return kind(self.engine, wasm)
        return kind.deserialize(self.engine, kind(self._serial_compiler(), wasm).serialize())

    def _serial_compiler(self) -> wasmtime.Engine:
        """An engine compiling as this one does, on the calling thread: in a forked
        child, wasmtime's compiler threads (a pool started once per process) are gone
        but the pool still hands them work, and a parallel compile waits for good."""
        if self._serial is None:
            cfg = self._wasmtime_config(pooled=False)  # no second reservation
            cfg.parallel_compilation = False
            self._serial = wasmtime.Engine(cfg)
        return self._serial

    @staticmethod
    def ticks_for(timeout_ms: int) -> int:
        """Deadline in ticks: never shorter than asked, plus one for the partial tick."""
        return -(-timeout_ms // TICK_MS) + 1

    def close(self) -> None:
        """Stop the epoch ticker."""
        self._ticker.stop()


def _reservable(nbytes: int) -> bool:
    """Whether the process may reserve `nbytes` of address space (inaccessible pages,
    which cost no memory) at once: wasmtime's pool makes the same reservation."""
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    if not flags or not hasattr(mmap, "PROT_READ"):  # no POSIX mmap: no pool
        return False
    try:
        region = mmap.mmap(-1, nbytes, flags=flags, prot=0)
    except (OSError, OverflowError, ValueError):
        return False
    region.close()
    return True


def _pooling(cfg: wasmtime.Config, slots: int) -> None:
    """Switch `cfg` to the pooling allocator with `slots` core instances, memories and
    tables (wasmtime-py wraps no pooling settings: the C API's entries, as its
    bindings load them)."""
    from wasmtime import _bindings as ffi  # the C API as wasmtime-py loads it

    pool = ffi.wasmtime_pooling_allocation_config_new()
    try:
        ffi.wasmtime_pooling_allocation_config_total_core_instances_set(pool, slots)
        ffi.wasmtime_pooling_allocation_config_total_memories_set(pool, slots)
        # Room for every slot's tables (SLOT_BYTES reserves them): with one table per
        # slot, an instance of a module with four took four slots' share of the pool.
        ffi.wasmtime_pooling_allocation_config_total_tables_set(
            pool, slots * POOL_TABLES_PER_MODULE)
        ffi.wasmtime_pooling_allocation_config_max_tables_per_module_set(
            pool, POOL_TABLES_PER_MODULE)
        ffi.wasmtime_pooling_allocation_config_table_elements_set(pool, POOL_TABLE_ELEMENTS)
        ffi.wasmtime_pooling_allocation_config_max_core_instance_size_set(
            pool, POOL_MAX_INSTANCE_BYTES)
        ffi.wasmtime_pooling_allocation_config_linear_memory_keep_resident_set(
            pool, KEEP_RESIDENT)
        ffi.wasmtime_pooling_allocation_strategy_set(cfg.ptr(), pool)
    finally:
        ffi.wasmtime_pooling_allocation_config_delete(pool)


_engines: dict[EngineConfig, SharedEngine] = {}
_lock = threading.Lock()
# True in a forked child: its compiles run on the calling thread (SharedEngine.compile).
_forked = False


def shared_engine(config: EngineConfig | None = None) -> SharedEngine:
    """The process-wide engine for `config` (created on first use)."""
    key = config or EngineConfig()
    with _lock:
        eng = _engines.get(key)
        if eng is None:
            eng = _engines[key] = SharedEngine(key)
        return eng


def _tick_again_in_child() -> None:
    """A forked child has neither the parent's timers nor its threads: each engine it
    inherited ticks anew, on a Python thread (else its guests would never time out;
    sandbox.epoch.forget_timers says why not on a timer), and compiles on the calling
    thread (wasmtime's compiler threads are gone: `SharedEngine._serial_compiler`)."""
    global _lock, _forked
    _lock = threading.Lock()  # another thread of the parent may have held it
    _forked = True
    forget_timers()
    for eng in _engines.values():
        eng._ticker = start_ticker(eng.engine)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_tick_again_in_child)
