"""A second backend: modules built with Extism PDKs, run by the extism Python SDK.

An Extism module is recognised by its `extism:host/env` imports. It runs
behind the same interface as a native plugin (`call`, `registration`,
`describe`, faults as named errors), with these limits applied through the
SDK: fuel per call (the library's fuel-limited constructor), memory pages and
a wall-clock timeout (both from the Extism manifest). Host functions are the
wasmext ones only, listed explicitly (the SDK's global registry is never
linked), and only those the plugin was granted:

    extism:host/user wasmext_host_call(request: msgpack) -> answer: msgpack   (always)
    extism:host/user wasmext_log(text)                                        (always)
    extism:host/user wasmext_state_get(key) -> value_json                     (grant: state)
    extism:host/user wasmext_state_set(key, value_json)                       (grant: state)

WASI is Extism's own (no environment, arguments or files), without `poll_oneoff`: a
module importing it is refused (`UnknownImport`), since Extism's sleep waits inside
host code where neither the call's deadline nor a cancel reaches.

A call is held to the same `CallBudget` as a native one: its host calls are
counted, timed and bounded by the call's deadline (an `http.fetch` sees the
time left, not a default), a nested call gets only its caller's time, and a
cancel interrupts the guest through the SDK's cancel handle.

An exception inside a host function does not vanish in the SDK (whose
callbacks cannot raise): it is kept, the host function returns nothing, and
`call` raises it as the plugin's error once the guest returns. A budget's
abort (time, host calls) also interrupts the guest, which stops at its next
epoch check instead of running on. Data crosses as UTF-8 text for
strings, as they are for bytes and JSON for everything else; the output is
JSON when it parses, else text when it is UTF-8, else bytes.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import Any

import wasmtime

from wasmext.errors import (
    CapabilityDenied,
    GuestTrap,
    InvalidOutput,
    LoadError,
    MemoryLimitExceeded,
    OutOfFuel,
    PluginError,
    PluginFault,
    Timeout,
    UnknownImport,
    WasmextError,
)
from wasmext.sandbox.budget import CallBudget
from wasmext.sandbox.codec import encode
from wasmext.sandbox.hostcalls import CallContext, HostServices
from wasmext.sandbox.instance import NO_META, CallResult
from wasmext.sandbox.limits import WASM_PAGE, Limits
from wasmext.sandbox.module import ModuleInfo
from wasmext.sandbox.plugin import HookSpec, Registration
from wasmext.sandbox.pluginlog import PluginLog

__all__ = ["EXTISM_KERNEL", "ExtismPlugin", "uses_extism"]

EXTISM_KERNEL = "extism:host/env"
USER_NS = "extism:host/user"
WASI = "wasi_snapshot_preview1"
_INTERNAL = {"memory", "_start", "_initialize", "hs_init", "__data_end", "__heap_base"}


def uses_extism(module: wasmtime.Module) -> bool:
    """Whether the module imports the Extism kernel."""
    return any(imp.module == EXTISM_KERNEL for imp in module.imports)


class _Active(threading.local):
    def __init__(self) -> None:
        self.stack: list[_CallState] = []


class _CallState:
    def __init__(self, plugin: ExtismPlugin) -> None:
        self.plugin = plugin
        self.error: WasmextError | None = None


_active = _Active()
_functions: dict[str, Any] = {}
_functions_lock = threading.Lock()


def _host_function(name: str, params: int, results: int,
                   body: Callable[[Any, _CallState, list[Any]], bytes | None]) -> Any:
    """One process-wide Extism function object per name, dispatching to the
    plugin whose call is running on this thread."""
    from extism.extism import HOST_FN_REGISTRY, ExplicitFunction, ValType

    with _functions_lock:
        if name in _functions:
            return _functions[name]

        def trampoline(current: Any, inputs: list[Any], outputs: list[Any], *_: Any) -> None:
            state = _active.stack[-1]
            # cffi callbacks cannot raise into the SDK (it would print and carry on), so
            # the error is kept and raised by ExtismPlugin.call when the guest returns.
            try:
                out = body(current, state, inputs)
            except WasmextError as err:
                state.error = state.error or err
                if state.plugin.budget.abort is not None:
                    state.plugin.interrupt()  # the call is over: the guest must not go on
                return
            except Exception as exc:
                state.error = state.error or GuestTrap(
                    f"host function {name} failed: {type(exc).__name__}: {exc}",
                    plugin_id=state.plugin.id)
                return
            if results and out is not None:
                current.return_bytes(outputs[0], out)

        # The SDK dispatches by index into its registry; linking is by our list only.
        idx = len(HOST_FN_REGISTRY).to_bytes(4, "big")
        fn = ExplicitFunction(USER_NS, name, [ValType.I64] * params, [ValType.I64] * results,
                              trampoline, [idx])
        HOST_FN_REGISTRY.append(fn)
        _functions[name] = fn
        return fn


def _dispatch(p: ExtismPlugin, started: float, request: bytes) -> dict[str, Any]:
    """One host call's op, within the call's budget (already charged)."""
    if len(request) > p.limits.max_host_request_bytes:
        p.budget.fail(InvalidOutput(f"host call request of {len(request)} bytes is over "
                                    f"{p.limits.max_host_request_bytes}",
                                    plugin_id=p.id, hook=p.ctx.hook))
    depth = p.limits.max_msgpack_depth
    return p.budget.host_call(started, lambda: p.services.dispatch(p.ctx, request, depth))


def _host_call(current: Any, state: _CallState, inputs: list[Any]) -> bytes:
    p = state.plugin
    p.budget.charge_host_call()
    return encode(_dispatch(p, time.perf_counter(), current.input_bytes(inputs[0])))


def _log(current: Any, state: _CallState, inputs: list[Any]) -> None:
    state.plugin.budget.charge_host_call()
    state.plugin.log.append("info", current.input_bytes(inputs[0])[
        :state.plugin.limits.max_log_line_bytes])


def _state_op(op: str) -> Callable[[Any, _CallState, list[Any]], bytes | None]:
    def body(current: Any, state: _CallState, inputs: list[Any]) -> bytes | None:
        p = state.plugin
        p.budget.charge_host_call()
        started = time.perf_counter()
        req: dict[str, Any] = {"op": op, "key": current.input_string(inputs[0])}
        if op == "state.set":
            req["value"] = json.loads(current.input_string(inputs[1]))
        answer = _dispatch(p, started, encode(req))
        if op == "state.get" and not answer["ok"] and answer["error"]["code"] == "not_found":
            return b"null"  # a missing key reads as JSON null, the Extism way
        if not answer["ok"]:
            code = answer["error"]["code"]
            message = f"{op}: {code}: {answer['error'].get('message', '')}"
            raise PluginError(p.log.scrub(message), code=p.log.scrub(str(code), 64),
                              plugin_id=p.id)
        return json.dumps(answer.get("value")).encode() if op == "state.get" else None
    return body


def _functions_for(grants: frozenset[str]) -> list[Any]:
    fns = [_host_function("wasmext_host_call", 1, 1, _host_call),
           _host_function("wasmext_log", 1, 0, _log)]
    if "state" in grants:
        fns += [_host_function("wasmext_state_get", 1, 1, _state_op("state.get")),
                _host_function("wasmext_state_set", 2, 0, _state_op("state.set"))]
    return fns


class ExtismPlugin:
    """An Extism-ABI module behind the wasmext plugin interface."""

    def __init__(self, wasm: bytes, module: wasmtime.Module, *, plugin_id: str,
                 limits: Limits, settings: Mapping[str, Any], sensitive: frozenset[str],
                 grants: frozenset[str], services: HostServices,
                 hooks: Iterable[str] | None = None, default_priority: int = 50) -> None:
        try:
            import extism
        except ImportError as exc:
            raise LoadError(f"plugin {plugin_id} is an Extism module; its backend needs: "
                            "pip install 'wasmext[extism]'", plugin_id=plugin_id) from exc

        self.id = plugin_id
        self.limits = limits
        self.requested_limits: dict[str, int] = {}  # the manifest's ask; the loader sets it
        self.settings = dict(settings)
        self.sensitive = sensitive
        self.grants = grants
        self.services = services
        secrets = [str(v) for k, v in self.settings.items() if k in sensitive and v is not None]
        self.log = PluginLog(plugin_id, limits.max_log_lines, limits.max_log_line_bytes, secrets)
        self.ctx = CallContext(plugin_id, grants, self.settings, sensitive, self.log,
                               limits=limits.as_dict())
        self.budget = CallBudget(limits, self.ctx, self)
        names = [e.name for e in module.exports
                 if isinstance(e.type, wasmtime.FuncType) and e.name not in _INTERNAL]
        imports = tuple((i.module, i.name or "") for i in module.imports)
        self.uses_wasi = any(m == WASI for m, _ in imports)
        if self.uses_wasi and (WASI, "poll_oneoff") in imports:
            # Extism links its own WASI, whose poll_oneoff sleeps inside host code where
            # neither the call's deadline nor a cancel reaches: a 6 s sleep under
            # timeout_ms = 300 ran 6 s and answered as if nothing happened.
            raise UnknownImport(f"plugin {plugin_id} imports {WASI}.poll_oneoff: the "
                                "Extism backend cannot bound a WASI sleep by the call's "
                                "deadline, so it offers none (build without sleeping, or "
                                "as a wasmext plugin, whose WASI ends such a call with "
                                "Timeout)", plugin_id=plugin_id)
        # The same shape as a native plugin's compiled module, for the host's bookkeeping.
        self.module = SimpleNamespace(info=ModuleInfo(
            hashlib.sha256(wasm).hexdigest(), len(wasm), tuple(names), imports, self.uses_wasi,
            False, False))
        hook_names = list(hooks) if hooks is not None else names
        self.registration = Registration(tuple(HookSpec(h, default_priority)
                                               for h in hook_names))
        self.calls = 0
        self.faults = 0
        self._sdk_timeout_ms = limits.timeout_ms
        manifest = {"wasm": [{"data": wasm}],
                    "memory": {"max_pages": max(1, limits.memory_bytes // WASM_PAGE)},
                    "timeout_ms": limits.timeout_ms, "config": {
                        k: v if isinstance(v, str) else json.dumps(v)
                        for k, v in self.settings.items() if k not in sensitive}}
        self._fns = _functions_for(grants)
        self._compiled = self._compile(extism, manifest)
        self._lock = threading.Lock()
        try:
            self._plugin = extism.Plugin(self._compiled)
        except extism.Error as exc:
            raise self._refused(str(exc)) from exc
        self._cancel = self._plugin.cancel_handle()

    def interrupt(self) -> None:
        """Stop the running guest at its next epoch check (a cancel, a spent budget)."""
        self._cancel.cancel()

    def _compile(self, extism: Any, manifest: dict[str, Any]) -> Any:
        """extism.CompiledPlugin, but through the fuel-limited constructor."""
        from extism.extism import CompiledPlugin, _ExtismFunctionMetadata, _ffi, _lib, _wasm

        compiled = CompiledPlugin.__new__(CompiledPlugin)
        compiled.functions = self._fns
        metas = [_ExtismFunctionMetadata(f) for f in self._fns]
        compiled._metas = metas  # keep the C function objects alive with the plugin
        ptrs = _ffi.new("ExtismFunction*[]", [m.pointer for m in metas])
        data = _wasm(manifest)
        errmsg = _ffi.new("char**")
        compiled.pointer = _lib.extism_compiled_plugin_new_with_fuel_limit(
            data, len(data), ptrs, len(metas), self.uses_wasi, self.limits.fuel_per_call,
            errmsg)
        if compiled.pointer == _ffi.NULL:
            msg = _ffi.string(errmsg[0]).decode(errors="replace")
            _lib.extism_plugin_new_error_free(errmsg[0])
            compiled.pointer = None
            raise self._refused(msg)
        return compiled

    def _refused(self, msg: str) -> WasmextError:
        if "unknown import" in msg and USER_NS in msg:
            return CapabilityDenied(f"plugin {self.id} imports a host function it was not "
                                    f"granted: {msg}", plugin_id=self.id)
        return LoadError(f"extism refused plugin {self.id}: {msg}", plugin_id=self.id)

    def _fault(self, msg: str, hook: str) -> PluginFault:
        msg = self.log.scrub(msg)  # extism's error text carries the guest's message
        low = msg.lower()
        if "fuel" in low:
            return OutOfFuel(f"used all {self.limits.fuel_per_call} fuel: {msg}",
                             plugin_id=self.id, hook=hook)
        if "timeout" in low or "timed out" in low or "interrupt" in low:
            return Timeout(f"ran past {self.limits.timeout_ms} ms: {msg}", plugin_id=self.id,
                           hook=hook)
        if "memory" in low and ("limit" in low or "grow" in low or "maximum" in low):
            return MemoryLimitExceeded(msg, plugin_id=self.id, hook=hook)
        return GuestTrap(msg, plugin_id=self.id, hook=hook)

    def call(self, hook: str, data: Any = None, meta: dict[str, Any] | None = None
             ) -> CallResult:
        """Call an Extism plugin's export with the data; calls take turns."""
        import extism

        payload = data.encode() if isinstance(data, str) else bytes(data) \
            if isinstance(data, (bytes, bytearray)) else json.dumps(data).encode()
        state = _CallState(self)
        self.calls += 1
        ctx = self.ctx
        with self._lock:  # one SDK plugin: calls (and the shared context) take turns
            ctx.hook = hook
            ctx.session = meta.get("session") if meta else None
            budget = self.budget
            _active.stack.append(state)
            budget.enter()
            ctx.begin(budget.frame.deadline)
            # The SDK's own timeout is the plugin's timeout_ms at load; a nested call must
            # end by its caller's deadline, and a call given less (set_call_limits) by its
            # own, when that comes first: interrupt the guest then.
            timer = threading.Timer(budget.seconds_left(), self.interrupt) \
                if budget.frame.clamped or self.limits.timeout_ms < self._sdk_timeout_ms \
                else None
            if timer is not None:
                timer.daemon = True
                timer.start()
            try:
                out = bytes(self._plugin.call(hook, payload))
            except extism.Error as exc:
                self.faults += 1
                ctx.finish(False)
                if state.error is not None:
                    raise state.error from exc
                if budget.abort is not None:  # interrupted: a cancel, or the caller's time
                    raise budget.abort from exc
                if budget.seconds_left() <= 0:  # its deadline passed, or a cancel moved it
                    raise budget.timeout_error("the guest") from exc
                raise self._fault(str(exc), hook) from exc
            finally:
                if timer is not None:
                    timer.cancel()
                budget.leave()
                _active.stack.pop()
            # State written by this call commits only when the call succeeded.
            try:
                ctx.finish(state.error is None)
            except WasmextError as err:
                state.error = state.error or err
        if state.error is not None:
            self.faults += 1
            raise state.error
        value: Any
        try:
            value = json.loads(out)
        except ValueError:
            try:
                value = out.decode("utf-8")
            except UnicodeDecodeError:
                value = out
        return CallResult(value, value != data, False, NO_META)

    def set_grants(self, grants: frozenset[str]) -> None:
        """Replace the plugin's grants."""
        self.grants = self.ctx.grants = grants

    def close(self) -> None:
        """Nothing to release."""
        pass

    def set_call_fuel(self, fuel: int) -> None:
        """Give each call `fuel` units from now on (an Extism module runs no registration)."""
        self.set_call_limits(fuel_per_call=fuel)

    def set_call_limits(self, **changes: int) -> None:
        """Hold each call to `changes` (`fuel_per_call`, `timeout_ms`) from now on; a
        deadline below the SDK's own (its manifest's) interrupts the guest at it."""
        self.limits = self.budget.limits = self.limits.replace(**changes)

    def describe(self) -> dict[str, Any]:
        """The plugin's id, hooks, module, limits and backend, for operators."""
        return {"id": self.id, "name": None, "version": None, "backend": "extism",
                "abi": {"major": 0, "minor": 0, "guest_minor": 0},
                "hooks": [{"hook": h.hook, "priority": h.priority, "pattern": None}
                          for h in self.registration.hooks],
                "extra": {}, "size": self.module.info.size,
                "digest": f"sha256:{self.module.info.digest}",
                "imports": [f"{m}.{n}" for m, n in self.module.info.imports],
                "wasi": self.uses_wasi,
                "limits": {"requested": dict(self.requested_limits),
                           "effective": self.limits.as_dict()}}
