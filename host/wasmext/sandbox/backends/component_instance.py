"""A component plugin: one instance's Store, limits and call protocol, and the
plugin that pools such instances.

It is a `PluginInstance` for the plugin layer and reuses its bookkeeping (the
call tree, host-call counting, the host-call time budget, aborts), but the
transport is the canonical ABI: requests and answers are `list<u8>` values,
so there is no guest allocator to call and no guest memory to read.

Limits: fuel per call and the epoch deadline as for core modules; the store
limiter caps each linear memory at `memory_bytes` (a componentized interpreter
has a few core instances and memories, each counted); input, output and
host-request sizes are checked on the bytes; WASI preview 2 with nothing of
the host (stdout and stderr go to the plugin log).
"""

from __future__ import annotations

import time
from typing import Any

import wasmtime

from wasmext._abi import ABI_MAJOR
from wasmext.errors import (
    AbiMismatch,
    EncodeError,
    GuestTrap,
    InputTooLarge,
    InvalidOutput,
    MemoryLimitExceeded,
    OutOfFuel,
    StackOverflow,
    WasmextError,
)
from wasmext.sandbox import watchdog
from wasmext.sandbox.backends.canon import BytesExport
from wasmext.sandbox.backends.component import ComponentModule
from wasmext.sandbox.budget import CallBudget
from wasmext.sandbox.codec import DecodeError, check_depth, encode, may_nest_deeper
from wasmext.sandbox.faults import classify, timeout
from wasmext.sandbox.fsgrants import preopen_args
from wasmext.sandbox.hostcalls import CallContext, HostServices
from wasmext.sandbox.instance import CallResult, PluginInstance
from wasmext.sandbox.limits import Limits
from wasmext.sandbox.plugin import Plugin

__all__ = ["ComponentInstance", "ComponentPlugin"]

# Store-wide counts: a componentized CPython or SpiderMonkey has about a dozen
# core instances, a few memories and tables. Generous, but finite.
MAX_CORE_INSTANCES = 64
MAX_MEMORIES = 16
MAX_TABLES = 64


class ComponentInstance(PluginInstance):
    """A live component instance. `start` once, then `call`."""

    def __init__(self, module: ComponentModule, limits: Limits, ctx: CallContext,
                 services: HostServices) -> None:
        # PluginInstance.__init__ instantiates a core module: not called.
        self.module = module
        self.limits = limits
        self.ctx = ctx
        self.services = services
        store = wasmtime.Store(module.engine.engine)
        # Watched (sandbox.watchdog): the deadline is a tick away, checked every tick.
        self.watched = watchdog.watch(store)
        self._ticks = 1 if self.watched else module.engine.ticks_for(limits.timeout_ms)
        store.set_limits(memory_size=limits.memory_bytes, table_elements=limits.table_elements,
                         instances=MAX_CORE_INSTANCES, memories=MAX_MEMORIES, tables=MAX_TABLES)
        self._streams = (ctx.log.stream_writer("stdout"), ctx.log.stream_writer("stderr"))
        wasi = wasmtime.WasiConfig()  # no args, env or stdin: nothing inherited
        wasi.stdout_custom = self._streams[0]
        wasi.stderr_custom = self._streams[1]
        # Folder grants only (`fs:PATH[:ro|rw]`), at the same guest paths as for core
        # modules; wasmtime's WASI confines every path to the folder.
        for host_path, guest_path, writable in preopen_args(ctx.grants):
            wasi.preopen_dir(host_path, guest_path, writable)
        store.set_wasi(wasi)
        self.store = store
        self.budget = CallBudget(limits, ctx, self, self._ticks, store.set_epoch_deadline)
        self.meter = False
        self._set_budget(limits.fuel_per_call, self._enter())
        try:
            instance = module.linker.instantiate(store, module.component)
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            raise self._classify(exc, "instantiate") from exc
        finally:
            self._leave()
        self._register = BytesExport(instance, store, "register")
        self._call_export = BytesExport(instance, store, "call")

    def _set_budget(self, fuel: int, ticks: int) -> None:
        self.store.set_fuel(fuel)
        self.store.set_epoch_deadline(ticks)

    def wasi_memory(self) -> Any:
        return None

    def wasi_fs(self) -> None:
        """wasmtime's WASI serves a component's folder grants (its preopens)."""
        return None

    def _at_memory_cap(self) -> bool:
        """The host cannot see a component's memories; the guest's runtime reports a
        refused grow on stderr (CPython: MemoryError) before it traps."""
        tail = [ln.text for ln in list(self.ctx.log.lines)[-8:] if ln.source == "stderr"]
        return any("MemoryError" in t or "out of memory" in t for t in tail)

    def _classify(self, exc: BaseException, what: str) -> WasmextError:
        budget = self.budget
        if budget.abort is not None:
            return budget.abort
        err = classify(exc, what, self.limits, self.ctx, False, budget.frame.clamped)
        if not isinstance(err, GuestTrap):
            return err
        # A component call reports a trap as an error whose text names the trap code.
        pid, hook, text = self.ctx.plugin_id, self.ctx.hook, err.message
        if "all fuel consumed" in text:
            return OutOfFuel(f"used all {self.limits.fuel_per_call} fuel in {what}",
                             plugin_id=pid, hook=hook)
        if "wasm trap: interrupt" in text:
            return timeout(what, self.limits, self.ctx, budget.frame.clamped)
        if "call stack exhausted" in text:
            return StackOverflow(f"wasm stack exhausted in {what}", plugin_id=pid, hook=hook)
        if self._at_memory_cap():
            return MemoryLimitExceeded(f"{what} failed at the {self.limits.memory_bytes}-byte "
                                       f"memory cap ({err.message})", plugin_id=self.ctx.plugin_id,
                                       hook=self.ctx.hook)
        return err

    def _run(self, export: BytesExport, payload: bytes, what: str) -> bytes:
        """One export call under a fresh budget; every failure a named error."""
        pid, hook = self.ctx.plugin_id, self.ctx.hook
        if len(payload) > self.limits.max_input_bytes:
            raise InputTooLarge(f"request of {len(payload)} bytes exceeds max_input_bytes "
                                f"{self.limits.max_input_bytes}", plugin_id=pid, hook=hook)
        self._set_budget(self.limits.fuel_per_call, self._enter())
        self.ctx.begin(self.budget.frame.deadline)
        try:
            answer = export(payload, self.limits.max_output_bytes)
        except Exception as exc:
            raise self._classify(exc, what) from exc
        finally:
            self._leave()
        if answer is None:
            raise InvalidOutput(f"{what} returned more than max_output_bytes "
                                f"{self.limits.max_output_bytes}", plugin_id=pid, hook=hook)
        return answer

    # -- the ABI -----------------------------------------------------------------

    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        """register; returns the registration map (the world's version is the ABI major)."""
        self.ctx.hook = "register"
        raw = self._run(self._register, encode(request), "register")
        if not raw:
            raise InvalidOutput("register returned nothing", plugin_id=self.ctx.plugin_id,
                                hook="register")
        reg = self._decode(raw, "registration map")
        if not isinstance(reg, dict):
            raise InvalidOutput("the registration map is not a map",
                                plugin_id=self.ctx.plugin_id, hook="register")
        if ABI_MAJOR != 1:  # the linked world is @1.0.0
            raise AbiMismatch("the component world is wasmext:plugin@1.0.0",
                              plugin_id=self.ctx.plugin_id, hook="register")
        return reg

    def call(self, hook: str, data: Any, meta: dict[str, Any] | None = None) -> CallResult:
        ctx = self.ctx
        ctx.hook = hook
        req = {"hook": hook, "data": data} if meta is None else \
            {"hook": hook, "data": data, "meta": meta}
        payload = encode(req)
        if may_nest_deeper(payload, self.limits.max_msgpack_depth):
            try:
                check_depth(req, self.limits.max_msgpack_depth)
            except DecodeError as exc:
                raise EncodeError(f"request for hook {hook}: {exc} (the ABI's limit)",
                                  plugin_id=ctx.plugin_id, hook=hook) from exc
        raw = self._run(self._call_export, payload, "call")
        used = self.limits.fuel_per_call - self.store.get_fuel() if self.meter else 0
        if not raw:
            return CallResult(data, False, fuel=used)
        return self._response(self._decode(raw, "call response"), data)._replace(fuel=used)

    # -- the imports ---------------------------------------------------------------

    def on_component_host_call(self, request: bytes | None) -> bytes:
        """Serve a guest's host call, charged to its budget; the encoded answer."""
        budget = self.budget
        budget.charge_host_call()
        pid, hook = self.ctx.plugin_id, self.ctx.hook
        if request is None or len(request) > self.limits.max_host_request_bytes:
            self._fail(InvalidOutput(f"host-call request over "
                                     f"{self.limits.max_host_request_bytes} bytes",
                                     plugin_id=pid, hook=hook))
        assert request is not None
        services, ctx, depth = self.services, self.ctx, self.limits.max_msgpack_depth
        return budget.host_call(time.perf_counter(),
                                lambda: encode(services.dispatch(ctx, request, depth)))

    def on_component_log(self, level: int, message: str) -> None:
        """Keep a guest's log line (truncated), charged as a host call."""
        self.budget.charge_host_call()
        self.ctx.log.append(level, message.encode()[:self.limits.max_log_line_bytes])

    def fuel_left(self) -> int:
        return self.store.get_fuel()


class ComponentPlugin(Plugin):
    """A component behind the plugin interface (pooling, faults, quarantine as usual)."""

    module: ComponentModule

    instance_type = ComponentInstance

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "backend": "component"}
