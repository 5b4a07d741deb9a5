"""The one shared wasmtime Engine and its epoch ticker.

Every plugin compiles against one Engine per distinct EngineConfig, so compiled
code is shared and the compile cache key is stable. Wall-clock deadlines use
epoch interruption: a daemon thread advances the epoch every `tick_ms`, and
each call sets its deadline in ticks. The thread runs only while an engine is
alive and costs one GIL hand-off per tick.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import threading
import weakref
from dataclasses import asdict, dataclass

import wasmtime

from wasmext._abi import DEFAULT_LIMITS
from wasmext.sandbox.fastcall import handle

__all__ = ["EngineConfig", "SharedEngine", "shared_engine"]

TICK_MS = 5


@dataclass(frozen=True)
class EngineConfig:
    """Engine-wide settings; everything else is per plugin."""

    max_wasm_stack_bytes: int = DEFAULT_LIMITS["max_wasm_stack_bytes"]
    cranelift_opt_level: str = "speed"
    parallel_compilation: bool = True

    def fingerprint(self) -> str:
        """Stable text that changes whenever compiled code would differ."""
        doc = {"config": asdict(self), "wasmtime": wasmtime_version(), "fuel": True,
               "epochs": True, "memory_may_move": False, "memory64": False,
               "multi_memory": False}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def wasmtime_version() -> str:
    """The installed wasmtime version."""
    from importlib.metadata import version

    return version("wasmtime")


class _EpochTicker(threading.Thread):
    def __init__(self, engine: wasmtime.Engine) -> None:
        super().__init__(name="wasmext-epoch", daemon=True)
        self._engine = weakref.ref(engine)
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(TICK_MS / 1000):
            engine = self._engine()
            if engine is None:
                return
            engine.increment_epoch()
            del engine

    def stop(self) -> None:
        self._stop_event.set()


class SharedEngine:
    """A wasmtime Engine configured for sandboxing, with its epoch ticker."""

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        cfg = wasmtime.Config()
        cfg.consume_fuel = True
        cfg.epoch_interruption = True
        cfg.max_wasm_stack = self.config.max_wasm_stack_bytes
        cfg.cranelift_opt_level = self.config.cranelift_opt_level
        cfg.parallel_compilation = self.config.parallel_compilation
        # Threads and shared memory would let a guest outlive its call.
        cfg.wasm_threads = False
        cfg.shared_memory = False
        # The ABI is wasm32 with one memory (abi/SPEC.md 1), and the store limiter caps
        # each memory: several would multiply `memory_bytes`, a 64-bit one holds pointers
        # the host's i32 reads cannot reach. Components' core modules need neither.
        cfg.wasm_memory64 = False
        cfg.wasm_multi_memory = False
        cfg.wasm_custom_page_sizes = False
        # A fixed base address lets each instance read it once (fastcall.MemoryView).
        cfg.memory_may_move = False
        self.engine = wasmtime.Engine(cfg)
        # Its wasm_engine_t, for the raw store entry (sandbox.fastcall): read once.
        self.handle = handle(ctypes.addressof(self.engine.ptr().contents))
        self.fingerprint = self.config.fingerprint()
        self._ticker = _EpochTicker(self.engine)
        self._ticker.start()

    @staticmethod
    def ticks_for(timeout_ms: int) -> int:
        """Deadline in ticks: never shorter than asked, plus one for the partial tick."""
        return -(-timeout_ms // TICK_MS) + 1

    def close(self) -> None:
        """Stop the epoch ticker."""
        self._ticker.stop()


_engines: dict[EngineConfig, SharedEngine] = {}
_lock = threading.Lock()


def shared_engine(config: EngineConfig | None = None) -> SharedEngine:
    """The process-wide engine for `config` (created on first use)."""
    key = config or EngineConfig()
    with _lock:
        eng = _engines.get(key)
        if eng is None:
            eng = _engines[key] = SharedEngine(key)
        return eng
