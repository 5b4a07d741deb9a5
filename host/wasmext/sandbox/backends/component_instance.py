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

import json
import time
from typing import Any

import wasmtime

from wasmext._abi import ABI_MAJOR
from wasmext.errors import (
    AbiMismatch,
    GuestTrap,
    InputTooLarge,
    InvalidOutput,
    MemoryLimitExceeded,
    OutOfFuel,
    PluginError,
    StackOverflow,
    WasmextError,
)
from wasmext.errors import WitValueRefused as ValueRefused
from wasmext.sandbox import watchdog
from wasmext.sandbox.backends.canon import BytesExport
from wasmext.sandbox.backends.component import ComponentModule
from wasmext.sandbox.backends.wit_tools import WitFunction, answer_floor
from wasmext.sandbox.budget import CallBudget
from wasmext.sandbox.codec import DecodeError, encode
from wasmext.sandbox.fastcall import budget_setter
from wasmext.sandbox.faults import classify, timeout
from wasmext.sandbox.fsgrants import preopen_args
from wasmext.sandbox.hostcalls import CallContext, HostServices
from wasmext.sandbox.instance import CallResult, PluginInstance, request_packer
from wasmext.sandbox.jsonwire import JSON_MARK, decode_json, json_request
from wasmext.sandbox.limits import Limits
from wasmext.sandbox.plugin import Plugin
from wasmext.sandbox.wasmcheck import (
    MAX_COMPONENT_MEMORIES,
    MAX_COMPONENT_TABLES,
    MAX_CORE_INSTANCES,
)

__all__ = ["ComponentInstance", "ComponentPlugin"]


class ComponentInstance(PluginInstance):
    """A live component instance. `start` once, then `call`."""

    module: ComponentModule

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
        # Store-wide counts, each refused at load past it (`ModuleCaps.check_component`):
        # one memory and four tables, as the limiter caps each, not their sum; core
        # instances (about a dozen in a componentized CPython or SpiderMonkey): generous,
        # but finite.
        store.set_limits(memory_size=limits.memory_bytes, table_elements=limits.table_elements,
                         instances=MAX_CORE_INSTANCES, memories=MAX_COMPONENT_MEMORIES,
                         tables=MAX_COMPONENT_TABLES)
        self._streams = (ctx.log.stream_writer("stdout"), ctx.log.stream_writer("stderr"))
        # Requests: one Packer per instance (one call at a time), as for core modules.
        self.__dict__["_pack"] = request_packer()  # in place of the core one's, made on use
        wasi = wasmtime.WasiConfig()  # no args, env or stdin: nothing inherited
        wasi.stdout_custom = self._streams[0]
        wasi.stderr_custom = self._streams[1]
        # Folder grants only (`fs:PATH[:ro|rw]`), at the same guest paths as for core
        # modules; wasmtime's WASI confines every path to the folder. Read-only even when
        # granted rw: wasmtime-py offers no hook to hold a component's writes to the [fs]
        # quota, and an unbounded write would let a plugin fill the host's disk.
        for host_path, guest_path, writable in preopen_args(ctx.grants):
            if writable:
                ctx.log.append("warn", f"fs grant {guest_path}: read-only for a component "
                               "(the [fs] quota cannot bound a component's writes)".encode(),
                               source="host")
            wasi.preopen_dir(host_path, guest_path, False)
        store.set_wasi(wasi)
        self.store = store
        self.__dict__["_set_budget"] = budget_setter(store)  # in place of the core one's
        self.budget = CallBudget(limits, ctx, self, self._ticks, store.set_epoch_deadline)
        self.meter = False
        self._set_budget(limits.fuel_per_call, self._enter())
        try:
            instance = module.linker.instantiate(store, module.component)
        except (wasmtime.Trap, wasmtime.WasmtimeError) as exc:
            raise self._classify(exc, "instantiate") from exc
        finally:
            self._leave()
        self.json = False  # the guest's registration listed "json" in `codecs`
        self._typed: dict[str, tuple[WitFunction, Any]] = {
            fn.tool: (fn, _typed_export(instance, store, fn)) for fn in module.wit_tools}
        # Whether a call may go to a typed export: a world without them skips the test.
        self._typed_path = bool(self._typed) or not module.world
        if not module.world:
            return
        self._register = BytesExport(instance, store, "register")
        self._call_export = BytesExport(instance, store, "call")

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
        if "too much data is being copied" in text:
            # wasmtime's own bound on what one call lifts (its "hostcall fuel"), met by
            # an answer of a few MB before the host could measure it: the same fault
            # as an answer measured over the cap.
            return InvalidOutput(f"{what} handed the host more data than one call may "
                                 f"copy (max_output_bytes {self.limits.max_output_bytes})",
                                 plugin_id=pid, hook=hook)
        if self._at_memory_cap():
            return MemoryLimitExceeded(f"{what} failed at the {self.limits.memory_bytes}-byte "
                                       f"memory cap ({err.message})", plugin_id=self.ctx.plugin_id,
                                       hook=self.ctx.hook)
        return err

    def _run_typed(self, func: Any, params: list[Any], what: str, started: float) -> Any:
        """One typed export call under a fresh budget whose time began at `started` (its
        arguments' conversion is the call's time); every failure a named error."""
        self._set_budget(self.limits.fuel_per_call, self.budget.enter(started))
        self.ctx.begin(self.budget.frame.deadline)
        try:
            if time.monotonic() > self.budget.frame.deadline:
                raise self.budget.timeout_error(f"{what}: converting its arguments")
            return func(self.store, *params)
        except Exception as exc:
            raise self._classify(exc, what) from exc
        finally:
            self._leave()

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

    def start(self, request: dict[str, Any] | bytes) -> dict[str, Any]:
        """register; returns the registration map (the world's version is the ABI major)."""
        self.ctx.hook = "register"
        for note in self.module.wit_notes:  # the typed functions left out, and why
            self.ctx.log.append(3, note.encode()[:self.limits.max_log_line_bytes])
        if not self.module.world:
            return self._typed_registration()
        raw = self._run(self._register, request if isinstance(request, bytes)
                        else encode(request), "register")
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
        codecs = reg.get("codecs")  # its shape is checked with the map (Registration)
        self.json = type(codecs) is list and "json" in codecs
        return self._with_typed_tools(reg) if self._typed else reg

    def call(self, hook: str, data: Any, meta: dict[str, Any] | None = None) -> CallResult:
        """Run one hook; raises PluginFault subclasses, PluginError or InputTooLarge.

        The hot path: what `_run` does is inlined for JSON and MessagePack requests
        alike, and `_answer` for a MessagePack answer (each frame of Python here is a
        measurable share of a small call)."""
        ctx = self.ctx
        ctx.hook = hook
        if self._typed_path and (not self.module.world or (
                hook == "on_tool" and isinstance(data, dict)
                and data.get("name") in self._typed)):
            return self._typed_call(hook, data)
        req = {"hook": hook, "data": data} if meta is None else \
            {"hook": hook, "data": data, "meta": meta}
        limits = self.limits
        # JSON when the guest asked for it and JSON carries the request exactly (within
        # the depth and size limits: json_request checks both), else MessagePack.
        payload = json_request(req, limits.max_msgpack_depth, limits.max_input_bytes) \
            if self.json else None
        if payload is None:
            payload = self._packed_request(req)
            if len(payload) > limits.max_input_bytes:
                raise InputTooLarge(f"request of {len(payload)} bytes exceeds max_input_bytes "
                                    f"{limits.max_input_bytes}", plugin_id=ctx.plugin_id,
                                    hook=hook)
        budget = self.budget
        self._set_budget(limits.fuel_per_call, budget.enter())
        ctx.begin(budget.frame.deadline)
        try:
            raw = self._call_export(payload, limits.max_output_bytes)
        except Exception as exc:
            raise self._classify(exc, "call") from exc
        finally:
            budget.leave()
        if raw is None:
            raise InvalidOutput(f"call returned more than max_output_bytes "
                                f"{limits.max_output_bytes}", plugin_id=ctx.plugin_id, hook=hook)
        if self.meter or not raw or self.json:
            return self._answer(raw, data)
        return self._response(self._decode(raw, "call response"), data)

    def _answer(self, raw: bytes, data: Any) -> CallResult:
        """A call's answer, read in the codec its first byte names (JSON only from a
        guest that asked for it: to any other, `{` is MessagePack's 123, no answer)."""
        used = self.limits.fuel_per_call - self.store.get_fuel() if self.meter else 0
        if not raw:
            return CallResult(data, False, fuel=used)
        if self.json and raw[0] == JSON_MARK:
            try:
                resp = decode_json(raw, self.limits.max_msgpack_depth)
            except DecodeError as exc:
                raise InvalidOutput(f"call response (JSON): {exc}", plugin_id=self.ctx.plugin_id,
                                    hook=self.ctx.hook) from exc
        else:
            resp = self._decode(raw, "call response")
        result = self._response(resp, data)
        return result._replace(fuel=used) if used else result

    # -- typed WIT exports as tools (sandbox.backends.wit_tools) --------------------

    def _typed_registration(self) -> dict[str, Any]:
        """The registration map of a component whose typed functions are its tools."""
        reg = {"hooks": [{"hook": "on_tool"}],
               "tools": [fn.registration() for fn in self.module.wit_tools]}
        return self._capped(reg)

    def _with_typed_tools(self, reg: dict[str, Any]) -> dict[str, Any]:
        """The guest's registration map with its typed functions added as tools (a tool
        the guest registered itself keeps its name; the typed one is left out)."""
        tools, hooks = reg.get("tools", []), reg.get("hooks")
        if not isinstance(tools, list) or not isinstance(hooks, list):
            return reg  # malformed: the registry and the registration check say so
        taken = {t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)}
        for fn in self.module.wit_tools:
            if fn.tool in taken:
                self._typed.pop(fn.tool, None)
                self.ctx.log.append(3, f"the typed function {fn.function} is not a tool: the "
                                    f"plugin registers a tool {fn.tool!r} itself".encode())
        extra = [fn.registration() for fn in self.module.wit_tools if fn.tool in self._typed]
        if not extra:
            return reg
        on_tool = any(isinstance(h, dict) and h.get("hook") == "on_tool" for h in hooks)
        return self._capped({**reg, "tools": tools + extra,
                             "hooks": hooks if on_tool else [*hooks, {"hook": "on_tool"}]})

    def _capped(self, reg: dict[str, Any]) -> dict[str, Any]:
        if len(encode(reg)) > self.limits.max_output_bytes:
            raise InvalidOutput(f"the tools derived from its WIT exports are over "
                                f"max_output_bytes {self.limits.max_output_bytes}",
                                plugin_id=self.ctx.plugin_id, hook="register")
        return reg

    def _typed_call(self, hook: str, data: Any) -> CallResult:
        """`on_tool` {"name", "args"}: the typed function, its arguments checked and
        converted from JSON, its answer converted back; any other hook is not served."""
        pid = self.ctx.plugin_id
        if hook != "on_tool":
            return CallResult(data, False)  # it registered no other hook
        # The caller's arguments may be huge: checking and converting them is the call's
        # time, counted against its deadline from here.
        started = time.monotonic()
        size = len(encode(data))
        if size > self.limits.max_input_bytes:
            raise InputTooLarge(f"request of {size} bytes exceeds max_input_bytes "
                                f"{self.limits.max_input_bytes}", plugin_id=pid, hook=hook)
        name = data.get("name") if isinstance(data, dict) else None
        found = self._typed.get(name) if isinstance(name, str) else None
        if found is None:
            raise PluginError(f"no tool {str(name)[:64]!r}", code="not_found",
                              plugin_id=pid, hook=hook)
        fn, func = found
        try:
            params = fn.arguments(data.get("args", {}))
        except ValueRefused as exc:
            raise PluginError(f"invalid arguments: {exc}", code="invalid", plugin_id=pid,
                              hook=hook) from None
        value = self._run_typed(func, params, f"{fn.function}", started)
        used = self.limits.fuel_per_call - self.store.get_fuel() if self.meter else 0
        # wasmtime lifts the answer outside the epoch deadline (a few million one-byte
        # values take seconds): that time is the call's, and past its deadline a fault.
        if time.monotonic() > self.budget.frame.deadline:
            raise self.budget.timeout_error(f"{fn.function} and the lifting of its answer")
        if answer_floor(value, self.limits.max_output_bytes) > self.limits.max_output_bytes:
            raise InvalidOutput(f"{fn.function} answered over max_output_bytes "
                                f"{self.limits.max_output_bytes}", plugin_id=pid, hook=hook)
        try:
            ok, out = fn.answer(value)
        except ValueRefused as exc:
            raise InvalidOutput(f"{fn.function}: {exc}", plugin_id=pid, hook=hook) from None
        size = len(encode(out))
        if size > self.limits.max_output_bytes:
            raise InvalidOutput(f"{fn.function} answered {size} bytes, over max_output_bytes "
                                f"{self.limits.max_output_bytes}", plugin_id=pid, hook=hook)
        if not ok:  # the function's own result<_, E> said err: the tool's error
            text = out if isinstance(out, str) else \
                f"{fn.function} answered its error case" if out is None else \
                json.dumps(out)[:2000]
            raise PluginError(self.ctx.log.scrub(text), code="failed", plugin_id=pid,
                              hook=hook)
        return CallResult(out, True, fuel=used)

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


def _typed_export(instance: Any, store: wasmtime.Store, fn: WitFunction) -> Any:
    """The exported function behind a WIT tool (inside its interface, if any)."""
    index = None
    if fn.interface is not None:
        index = instance.get_export_index(store, fn.interface)
    found = instance.get_export_index(store, fn.function, index) \
        if fn.interface is not None and index is not None else \
        instance.get_export_index(store, fn.function) if fn.interface is None else None
    func = instance.get_func(store, found) if found is not None else None
    if func is None:
        raise AbiMismatch(f"export {fn.function!r} is missing from the instance")
    return func


class ComponentPlugin(Plugin):
    """A component behind the plugin interface (pooling, faults, quarantine as usual)."""

    module: ComponentModule

    instance_type = ComponentInstance

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "backend": "component"}
