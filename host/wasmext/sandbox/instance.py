"""One sandboxed instance of a plugin: a Store, its limits, and the call protocol.

An instance is not thread-safe; `Plugin` hands each one to one caller at a time.
After a fault the instance is discarded (its memory may be half-updated), so
every method here may assume the guest is in a state it produced itself.
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import msgpack
import wasmtime

from wasmext._abi import ABI_MAJOR
from wasmext.errors import (
    AbiMismatch,
    EncodeError,
    GuestTrap,
    HostCallLimitExceeded,
    InputTooLarge,
    InvalidOutput,
    MemoryLimitExceeded,
    PluginError,
    PluginFault,
    WasmextError,
)
from wasmext.sandbox import watchdog
from wasmext.sandbox.budget import ONE_CLOCK, CallBudget
from wasmext.sandbox.codec import DecodeError, check_depth, decode, encode, may_nest_deeper
from wasmext.sandbox.fastcall import (
    Caller,
    MemoryView,
    StoreBinding,
    export_key,
    new_store,
    take_host_exception,
)
from wasmext.sandbox.faults import classify, first_line
from wasmext.sandbox.hostcalls import CallContext, HostServices, KnownRequest
from wasmext.sandbox.limits import WASM_PAGE, Limits
from wasmext.sandbox.module import PluginModule
from wasmext.sandbox.wasifs import FsTable
from wasmext.text import clean

__all__ = ["CallResult", "PluginInstance"]

_MIN_INPUT = 4096
_perf_counter = time.perf_counter  # one global load per host call, not two
# The exports an instance calls once, when it starts (StoreBinding.call_once).
_INITIALIZE = export_key("_initialize")
_ABI_VERSION = export_key("wasmext_abi_version")
_ALLOC = export_key("wasmext_alloc")
_REGISTER = export_key("wasmext_register")
NO_META: Mapping[str, Any] = MappingProxyType({})
# An error's help_url: an http(s) address without spaces or controls, else dropped.
# What a failed registration quotes of the plugin's log: enough for one sentence of why.
LAST_WORDS_CAP = 300
HELP_URL = re.compile(r"^https?://[^\s\x00-\x1f\x7f]{1,500}$")


class CallResult(NamedTuple):
    """A hook's answer. `changed` is False when the guest left the input as it was."""

    value: Any
    changed: bool
    stop: bool = False
    meta: Mapping[str, Any] = NO_META
    fuel: int = 0  # fuel the call consumed, when the plugin is metered


_PACK_START = 1024  # bytes; a hook request is usually a few hundred


def request_packer() -> Callable[[Any], bytes]:
    """An instance's own MessagePack packer, reused for every document it packs. It
    starts small and grows to the largest document it packed: msgpack's default is
    256 KiB per Packer, most of what an idle instance held (docs/performance.md, "Many
    plugins")."""
    packer = msgpack.Packer(use_bin_type=True, autoreset=True, buf_size=_PACK_START)
    return packer.pack  # type: ignore[no-any-return]


def _inside_the_open_budget(_what: str, fn: Any, *args: Any) -> Any:
    """`PluginInstance._guest`'s shape for an export run inside a budget already open
    (its caller names and classifies the failure)."""
    return fn(*args)


def _unpack(packed: int) -> tuple[int, int]:
    return packed >> 32, packed & 0xFFFFFFFF


class _BeforeStart:
    """`PluginInstance.memory` until instantiation is over: the ABI has no host calls
    from a start function, and one is refused by name (not by a missing attribute)."""

    known = last_size = 0

    def size(self) -> int:
        """Nothing is known of memory yet (a fault's classification asks)."""
        return 0

    def __getattr__(self, name: str) -> Any:
        raise AbiMismatch("a start function called the host: host calls begin once the "
                          "instance has started (use _initialize or the first hook call)")


class PluginInstance:
    """A live instance. Create with a compiled module; call `register` once, then `call`."""

    def __init__(self, module: PluginModule, limits: Limits, ctx: CallContext,
                 services: HostServices) -> None:
        self.module = module
        self.limits = limits
        self.ctx = ctx
        self.services = services
        # Host-call requests this instance decoded before (HostServices.dispatch_packed).
        self._known: dict[bytes, KnownRequest] = {}
        store = new_store(module.engine.engine, module.engine.handle)
        self.watched = watchdog.watch(store)  # else a cancel must write the store's deadline
        self._ticks = 1 if self.watched else module.engine.ticks_for(limits.timeout_ms)
        self._binding = binding = StoreBinding(store)
        binding.limit(limits.memory_bytes, limits.table_elements, 1, 4, 1)
        self.store = store
        # The budget names its guest through a proxy: a cycle back to this instance
        # would keep a dropped instance's store (its memory and address-space
        # reservation) alive until the garbage collector's next pass.
        self.budget = CallBudget(limits, ctx, weakref.proxy(self), self._ticks,
                                 store.set_epoch_deadline)
        runs_guest = module.info.has_start
        if runs_guest:
            binding.start_budget(limits.fuel_per_call, self._enter())
        else:
            # No start function: instantiating runs no guest code, so it opens no
            # call-tree frame. It still gets fuel and a deadline (the call's whole time,
            # checked by no watchdog callback): with no fuel, wasmtime reported an
            # out-of-bounds data segment as "all fuel consumed", and with a deadline
            # already passed as a deadline check, not as the trap it is.
            binding.start_budget(limits.fuel_per_call, module.engine.ticks_for(limits.timeout_ms))
        try:
            binding.instantiate(module.pre, module.pre_handle)
        except Exception as exc:
            # wasmtime-py re-raises what its global holds: a host function's stand-in,
            # maybe another thread's; this thread's own exception is kept apart.
            caught = take_host_exception()
            raise self._classify(caught or exc, "instantiate") from caught or exc
        finally:
            if runs_guest:
                self._leave()
        # Without a start function nothing ran that could grow memory: it has its
        # declared size, and wasmtime need not be asked.
        self.memory = binding.memory(now=None if runs_guest else module.info.memory_bytes)
        self._alloc_fn: Caller | None = None
        self._fuel_left: Any = None  # bound on first metered call
        self.meter = False
        # Instantiation set a call's fuel and ran no guest code: the registration
        # protocol may go on with that fuel (what is left after wasmtime charged the
        # module's constant expressions, a few units each: never more than a call's).
        self._fuel_whole = not runs_guest
        self._in_ptr = 0
        self._in_cap = 0

    # The instance's own view once instantiated (a stand-in that refuses by name before).
    memory: MemoryView = _BeforeStart()  # type: ignore[assignment]
    # (ptr, size) the guest declared for host_call answers (Plugin.new_instance sets it
    # from a minor-3 registration); (0, 0): every answer goes through wasmext_alloc.
    answer_region: tuple[int, int] = (0, 0)
    _streams: tuple[Any, Any] | None = None  # stdout and stderr captures, made at first write
    _fs: FsTable | None = None  # the folder grants' fds, made at the first file call
    _fs_frame: Any = None       # the call `_fs_io` counts bytes for
    _fs_io = 0

    def set_call_fuel(self, fuel: int) -> None:
        """Give this instance's hook calls `fuel` units each from now on (its start-up
        ran under the limits it was made with)."""
        self.set_call_limits(fuel_per_call=fuel)

    def set_call_limits(self, **changes: int) -> None:
        """Hold this instance's hook calls to `changes` (`fuel_per_call`, `timeout_ms`)
        from now on; its start-up ran under the limits it was made with."""
        self.limits = self.budget.limits = self.limits.replace(**changes)
        if "timeout_ms" in changes and not self.watched:  # a watched store's tick is 1
            self._ticks = self.budget.ticks = self.module.engine.ticks_for(
                self.limits.timeout_ms)

    def _set_budget(self, fuel: int, ticks: int) -> None:
        """Set the store's (fuel, epoch ticks) before a call: the setter is made at the
        first call that needs it (start-up uses `StoreBinding.start_budget`) and
        shadows this method from then on."""
        setter = self.__dict__["_set_budget"] = self._binding.budget()
        setter(fuel, ticks)

    def _pack(self, doc: Any) -> bytes:
        """Requests and host-call answers: one Packer per instance (an instance runs on
        one thread at a time), made at its first use (a start function's host call, or
        the first hook call) and shadowing this method from then on."""
        pack = self.__dict__["_pack"] = request_packer()
        return pack(doc)

    def _call(self, ptr: int, length: int) -> int:
        """`wasmext_call`, bound at the instance's first hook call (this method is then
        shadowed by the binding): an instance that is never called binds nothing."""
        call = self.__dict__["_call"] = self._binding.func("wasmext_call", 2, True)
        return call(ptr, length)

    def _bind(self, name: str, nparams: int, has_result: bool) -> Caller:
        """Bind an export on first use: most are called once per instance."""
        return self._binding.func(name, nparams, has_result)

    def _bind_alloc(self) -> Caller:
        self._alloc_fn = alloc = self._bind("wasmext_alloc", 1, True)
        return alloc

    def _alloc(self, size: int) -> int:
        return (self._alloc_fn or self._bind_alloc())(size)

    # -- WASI (sandbox.wasi calls these on the instance on top of the stack) ------

    def wasi_memory(self) -> Any:
        """The guest's memory view, or None before it exists."""
        return getattr(self, "memory", None)

    def wasi_output(self, fd: int, data: bytes) -> None:
        """Pass the guest's stdout (fd 1) or stderr (fd 2) bytes to its capture."""
        streams = self._streams
        if streams is None:  # most guests never write: their instances make none
            log = self.ctx.log
            streams = self._streams = (log.stream_writer("stdout"), log.stream_writer("stderr"))
        streams[fd - 1](data)

    def wasi_seconds_left(self) -> float:
        """Seconds left before the call's deadline."""
        return self.budget.seconds_left()

    def wasi_timeout(self, why: str) -> None:
        """Fail the call with Timeout."""
        self.budget.timed_out(why)

    def wasi_exit(self, code: int) -> None:
        """Fail the call with GuestTrap: the guest called proc_exit."""
        self.budget.fail(GuestTrap(f"proc_exit({code})", **self._where()))

    def wasi_fs(self) -> FsTable | None:
        """The granted folders and open files (made at first use); None without an
        `fs:` grant."""
        fs = self._fs
        if fs is None:
            if not any(g.startswith("fs:") for g in self.ctx.grants):
                return None
            # Nothing it keeps leads back to the instance: a cycle kept a dropped
            # instance's store (its memory and pool slot) until a collection.
            ctx, charge = self.ctx, weakref.WeakMethod(self._fs_charge_io)
            log = ctx.log

            def io(nbytes: int) -> None:
                bound = charge()
                if bound is not None:  # only ever called inside this instance's calls
                    bound(nbytes)

            def note(text: str) -> None:
                log.append("warn", text.encode(), source="host")

            fs = self._fs = FsTable(lambda: ctx.grants, self.services.fs_quota, io, note)
        return fs

    def release_files(self) -> None:
        """Close the files the guest holds in granted folders (the instance is discarded)."""
        fs, self._fs = self._fs, None
        if fs is not None:
            fs.close_all()

    def wasi_fs_done(self, started: float) -> None:
        """A file operation's time is host-call time of the running call."""
        self.budget.check_time(started)

    def _fs_charge_io(self, nbytes: int) -> None:
        """Count file bytes moved in this call; past the quota's max_io_bytes, fail it."""
        budget = self.budget
        if budget.frame is not self._fs_frame:
            self._fs_frame, self._fs_io = budget.frame, 0
        self._fs_io += nbytes
        cap = self.services.fs_quota.max_io_bytes
        if self._fs_io > cap:
            budget.fail(HostCallLimitExceeded(
                f"more than {cap} bytes of file reads and writes in one call",
                plugin_id=self.ctx.plugin_id, hook=self.ctx.hook))

    def _where(self) -> dict[str, Any]:
        return {"plugin_id": self.ctx.plugin_id, "hook": self.ctx.hook}

    # -- entering and leaving the guest -------------------------------------------

    def _enter(self) -> int:
        """Open this call's budget; its epoch ticks (1: a watchdog store)."""
        return self.budget.enter()

    def _leave(self) -> None:
        self.budget.leave()

    def _guest(self, what: str, fn: Any, *args: Any) -> int:
        """Run one export with a fresh budget; every failure becomes a named error."""
        self._set_budget(self.limits.fuel_per_call, self.budget.enter())
        try:
            return int(fn(*args))
        except Exception as exc:
            raise self._classify(exc, what) from exc
        finally:
            self._leave()

    def _at_memory_cap(self) -> bool:
        """Did this call plausibly fail because memory.grow was refused?

        wasmtime returns -1 from a refused grow instead of trapping, and says
        nothing to the host; so: memory is within 1/8 of the cap, or it grew
        during this call to more than half the cap.
        """
        cap = self.limits.memory_bytes
        size = self.memory.size()
        if size + max(WASM_PAGE, cap // 8) > cap:
            return True
        return size > cap // 2 and size > self.memory.last_size

    def _classify(self, exc: BaseException, what: str) -> WasmextError:
        if self.budget.abort is not None:
            return self.budget.abort
        at_cap = hasattr(self, "memory") and self._at_memory_cap()
        return classify(exc, what, self.limits, self.ctx, at_cap, self.budget.frame.clamped)

    # -- buffers -----------------------------------------------------------------

    def _obtain(self, size: int) -> int:
        """A guest region of `size` bytes from wasmext_alloc for a request, validated."""
        if self._alloc_fn is None:  # the request buffer at start: a guest without host
            # calls may never ask for another region, so nothing is bound for it
            ptr = self._binding.call_once(_ALLOC, True, size)
        else:
            ptr = self._alloc_fn(size)
        if ptr == 0:
            err = MemoryLimitExceeded if self._at_memory_cap() else InvalidOutput
            raise err(f"wasmext_alloc({size}) returned 0",
                      plugin_id=self.ctx.plugin_id, hook=self.ctx.hook)
        memory = self.memory
        # Inside the size memory is known to have (it never shrinks), it is inside memory.
        if ptr + size > memory.known and ptr + size > memory.size():
            raise InvalidOutput(f"wasmext_alloc({size}) returned {ptr:#x}, outside memory",
                                plugin_id=self.ctx.plugin_id, hook=self.ctx.hook)
        return ptr

    def _write_input(self, data: bytes, opened: bool = False) -> tuple[int, int]:
        """Write a request into the input buffer, first growing it through the guest's
        allocator when it is too small; (ptr, len). `opened`: a budget is already open
        (the registration protocol's), so the allocator runs inside it, not under a
        budget of its own."""
        n = len(data)
        if n > self.limits.max_input_bytes:
            raise InputTooLarge(f"request of {n} bytes exceeds max_input_bytes "
                                f"{self.limits.max_input_bytes}", plugin_id=self.ctx.plugin_id,
                                hook=self.ctx.hook)
        if n > self._in_cap:
            # Never larger than the input cap: the hot path in `call` writes any
            # request that fits the buffer without checking the cap again.
            cap = min(max(_MIN_INPUT, 1 << (n - 1).bit_length()), self.limits.max_input_bytes)
            run = _inside_the_open_budget if opened else self._guest
            ptr = self._obtain(cap) if opened else self._guest("wasmext_alloc", self._obtain, cap)
            if self.module.info.has_free and self._in_cap:
                free = self._bind("wasmext_free", 2, False)
                run("wasmext_free", free, self._in_ptr, self._in_cap)
            self._in_ptr, self._in_cap = ptr, cap
        if not self.memory.write(self._in_ptr, data):
            raise InvalidOutput("the request buffer is no longer inside memory",
                                plugin_id=self.ctx.plugin_id, hook=self.ctx.hook)
        return self._in_ptr, n

    def _packed_request(self, req: dict[str, Any]) -> bytes:
        """A hook call's request as MessagePack; EncodeError for what it cannot carry or
        what nests deeper than the ABI allows (guests refuse such documents: say so
        here instead)."""
        try:
            payload: bytes = self._pack(req)
        except (TypeError, ValueError, OverflowError):
            payload = encode(req)  # raises EncodeError with the reason
        if may_nest_deeper(payload, self.limits.max_msgpack_depth):
            try:
                check_depth(req, self.limits.max_msgpack_depth)
            except DecodeError as exc:
                raise EncodeError(f"request for hook {req['hook']}: {exc} (the ABI's limit)",
                                  plugin_id=self.ctx.plugin_id, hook=self.ctx.hook) from exc
        return payload

    def _read_output(self, packed: int, what: str) -> bytes | None:
        if packed == 0:
            return None
        ptr, length = packed >> 32, packed & 0xFFFFFFFF
        pid, hook = self.ctx.plugin_id, self.ctx.hook
        if length > self.limits.max_output_bytes:
            raise InvalidOutput(f"{what} returned {length} bytes, over max_output_bytes "
                                f"{self.limits.max_output_bytes}", plugin_id=pid, hook=hook)
        data = self.memory.read(ptr, length)
        if data is None:
            raise InvalidOutput(f"{what} returned ptr {ptr:#x} len {length}, outside its "
                                f"{self.memory.size()}-byte memory", plugin_id=pid, hook=hook)
        return data

    def _decode(self, data: bytes, what: str) -> Any:
        try:
            return decode(data, self.limits.max_msgpack_depth)
        except DecodeError as exc:
            raise InvalidOutput(f"{what}: {exc}", plugin_id=self.ctx.plugin_id,
                                hook=self.ctx.hook) from exc

    # -- the ABI -----------------------------------------------------------------

    def start(self, request: dict[str, Any] | bytes) -> dict[str, Any]:
        """_initialize, the version check and wasmext_register; returns the registration map.
        `request` is the registration request, or its MessagePack bytes.

        `_initialize` runs under a budget of its own (a runtime's start-up may be most
        of it); the registration protocol, `wasmext_abi_version`, the request buffer's
        `wasmext_alloc` and `wasmext_register`, runs under one fresh budget: one
        call's fuel and deadline for the three, as a hook call's host calls share its."""
        self.ctx.hook = "register"
        since = time.time()  # what the plugin logs from here on may say why it failed
        once = self._binding.call_once
        if self.module.info.has_initialize:
            self._binding.start_budget(self.limits.fuel_per_call, self.budget.enter())
            try:
                once(_INITIALIZE, False)
            except Exception as exc:
                raise self._classify(exc, "_initialize") from exc
            finally:
                self.budget.leave()
        module = self.module
        what = "wasmext_abi_version"
        if self._fuel_whole and not module.info.has_initialize:
            # No guest code ran since instantiation set the fuel: the protocol shares it.
            self._binding.start_deadline(self.budget.enter())
        else:
            self._binding.start_budget(self.limits.fuel_per_call, self.budget.enter())
        try:
            # The version is a constant of the code (every SDK's is), asked of the first
            # instance of a load only: an answer that changes later (the guest read a
            # clock or random bytes) changes nothing, since the host speaks the major
            # the load was checked for and checks every instance's registration anyway.
            if not module.abi_checked:
                major = once(_ABI_VERSION, True) & 0xFFFFFFFF
                if major != ABI_MAJOR:
                    raise AbiMismatch(f"guest speaks ABI major {major}, host speaks "
                                      f"{ABI_MAJOR}", plugin_id=self.ctx.plugin_id,
                                      hook="register")
                module.abi_checked = True
            what = "wasmext_alloc"
            ptr, n = self._write_input(
                request if isinstance(request, bytes) else encode(request), opened=True)
            what = "wasmext_register"
            packed = once(_REGISTER, True, ptr, n)
        except Exception as exc:
            raise self._classify(exc, what) from exc
        finally:
            self.budget.leave()
        raw = self._read_registration(packed, since)
        # The same bytes decode to the same map: an instance that answers as the last
        # one of this module did (the usual case) is not decoded again.
        last = module.last_registration
        if last is not None and last[0] == raw:
            return last[1]
        reg = self._decode(raw, "registration map")
        if not isinstance(reg, dict):
            raise InvalidOutput("the registration map is not a map",
                                plugin_id=self.ctx.plugin_id, hook="register")
        module.last_registration = (raw, reg)
        return reg

    def _read_registration(self, packed: int, since: float = 0.0) -> bytes:
        """The registration map's bytes: read as `_read_output` would, but without asking
        wasmtime the memory's size when the map lies inside the size already known (a
        map in the module's data segments, as an SDK's usually is)."""
        ptr, length = packed >> 32, packed & 0xFFFFFFFF
        memory = self.memory
        if packed and length <= self.limits.max_output_bytes and ptr + length <= memory.known:
            # A fault's "did memory grow during this call" compares with the size read
            # last: the size known now stands in for it.
            memory.last_size = memory.known
            return memory.view[ptr:ptr + length].tobytes()
        raw = self._read_output(packed, "wasmext_register")
        if raw is None:
            # An SDK that has nothing to register logs why (Go's: no wasmext.Register).
            said = next((line.text for line in reversed(self.ctx.log.lines)
                         if line.time >= since and (line.level == "error"
                                                    or line.source == "stderr")), None)
            raise InvalidOutput("wasmext_register returned nothing" + (
                f"; the plugin logged: {clean(said, LAST_WORDS_CAP)}" if said else ""),
                plugin_id=self.ctx.plugin_id, hook="register")
        return raw

    def call(self, hook: str, data: Any, meta: dict[str, Any] | None = None) -> CallResult:
        """Run one hook; raises PluginFault subclasses, PluginError or InputTooLarge.

        This is the hot path: it inlines what `_guest` and `_write_input` do in
        the common case (the request fits the buffer the guest already gave us).
        """
        ctx = self.ctx
        ctx.hook = hook
        req = {"hook": hook, "data": data} if meta is None else \
            {"hook": hook, "data": data, "meta": meta}
        payload = self._packed_request(req)
        n = len(payload)
        if n > self._in_cap:
            self._write_input(payload)
        else:
            self.memory.write_unchecked(self._in_ptr, payload)
        budget = self.budget
        self._set_budget(self.limits.fuel_per_call, budget.enter())
        ctx.begin(budget.frame.deadline)  # storage waits end by it (state.deadline)
        try:
            packed = self._call(self._in_ptr, n)
        except Exception as exc:
            raise self._classify(exc, "wasmext_call") from exc
        finally:
            budget.leave()
        if self.meter:
            return self._metered(packed, data)
        if packed == 0:
            return CallResult(data, False)
        raw = self._read_output(packed, "wasmext_call")
        assert raw is not None
        return self._response(self._decode(raw, "call response"), data)

    def _metered(self, packed: int, data: Any) -> CallResult:
        if self._fuel_left is None:
            self._fuel_left = self._binding.fuel_left()
        used = self.limits.fuel_per_call - self._fuel_left()
        if packed == 0:
            return CallResult(data, False, fuel=used)
        raw = self._read_output(packed, "wasmext_call")
        assert raw is not None
        return self._response(self._decode(raw, "call response"), data, used)

    def _response(self, resp: Any, data: Any, fuel: int = 0) -> CallResult:
        pid, hook = self.ctx.plugin_id, self.ctx.hook
        if not isinstance(resp, dict) or type(resp.get("ok")) is not bool:
            raise InvalidOutput("call response must be a map with a bool 'ok'",
                                plugin_id=pid, hook=hook)
        if not resp["ok"]:
            err = resp.get("error")
            if not isinstance(err, dict) or not isinstance(err.get("code"), str):
                raise InvalidOutput("failed call response needs error.code",
                                    plugin_id=pid, hook=hook)
            message = err.get("message")  # guest text enters the host here: scrub it
            scrub = self.ctx.log.scrub
            suggestion, url = err.get("suggestion"), err.get("help_url")
            raise PluginError(scrub(message) if isinstance(message, str) else "",
                              code=scrub(err["code"], 64), plugin_id=pid, hook=hook,
                              suggestion=scrub(suggestion, 512)
                              if isinstance(suggestion, str) and suggestion else None,
                              help_url=scrub(url, 512) if isinstance(url, str) and
                              HELP_URL.match(url) else None)
        stop = resp.get("stop", False)
        meta = resp.get("meta", NO_META)
        if type(stop) is not bool or not isinstance(meta, (dict, MappingProxyType)):
            raise InvalidOutput("'stop' must be a bool and 'meta' a map",
                                plugin_id=pid, hook=hook)
        if "value" in resp:
            return CallResult(resp["value"], True, stop, meta, fuel)
        return CallResult(data, False, stop, meta, fuel)

    # -- the imports (called by hostlink while this instance is on top) -----------

    def _fail(self, err: PluginFault) -> None:
        """Abort the running call with `err` (wasmtime turns the raise into a trap)."""
        self.budget.fail(err)

    def on_host_call(self, ptr: int, length: int) -> int:
        """Serve the guest's host call, charged to its budget; (ptr << 32) | len of the answer."""
        budget = self.budget
        frame = budget.frame
        if budget.abort is None and frame.calls_left > 0:
            frame.calls_left -= 1  # `charge_host_call` when it has nothing to say
        else:
            budget.charge_host_call()  # raises the abort, or HostCallLimitExceeded
        started = _perf_counter()
        limits = self.limits
        if length > limits.max_host_request_bytes:
            self._fail(InvalidOutput(f"host_call request of {length} bytes is over "
                                     f"{limits.max_host_request_bytes}",
                                     plugin_id=self.ctx.plugin_id, hook=self.ctx.hook))
        memory = self.memory
        end = ptr + length
        # `read_guest`, inline when the region is inside the size memory already had.
        request = memory.view[ptr:end].tobytes() if end <= memory.known else \
            memory.read_guest(ptr, length)
        if request is None:
            self._fail(InvalidOutput(f"host_call request ptr {ptr:#x} len {length} is outside "
                                     "memory", plugin_id=self.ctx.plugin_id, hook=self.ctx.hook))
        assert request is not None
        services = self.services
        known = self._known.get(request)
        if known is not None and known[0] in services.local_ops:
            # Decoded before, and served from memory: it neither waits nor calls out,
            # so it runs without bounding the frame's deadline, and its time is charged
            # with the answer's delivery in one reading of the clock.
            answer = services.known_local(self.ctx, known, self._pack)
            size = len(answer)
            at, room = self.answer_region
            if size <= room and at + size <= memory.known:
                # The usual case, `check_time` inline: the time charged, and the three
                # bounds compared here; `verdict` runs (and fails the call) only when
                # one of them is over.
                memory.view[at:at + size] = answer
                budget.checked_at = now = _perf_counter()
                budget.host_seconds += now - started
                if budget.host_seconds > budget.host_budget_s or frame.calls_left < 0 or \
                        (now if ONE_CLOCK else time.monotonic()) >= frame.deadline:
                    budget.verdict(now)
                return (at << 32) | size
            delivering = started
        else:
            answer = budget.host_call(started, services.dispatch_packed, self.ctx, request,
                                      limits.max_msgpack_depth, self._pack, self._known)
            delivering = budget.checked_at  # where host_call's last check read the clock
        size = len(answer)
        if size <= self.answer_region[1]:
            # SPEC 1.4.1 (minor 3): the guest's own area, no second guest entry. Its address
            # is the guest's word, so it is checked against the memory's size now (the
            # memory may have grown into it since); an area past the end is as if the
            # answer did not fit.
            at = self.answer_region[0]
            if at + size <= memory.known:  # `write`, inline: the region is known
                memory.view[at:at + size] = answer
                budget.check_time(delivering)
                return (at << 32) | size
            if memory.write(at, answer):
                budget.check_time(delivering)
                return (at << 32) | size
        try:
            out = (self._alloc_fn or self._bind_alloc())(size)
        except Exception as exc:
            if isinstance(exc, wasmtime.Trap) and exc.trap_code == wasmtime.TrapCode.INTERRUPT:
                # The deadline passed (or the call was cancelled) while the guest
                # allocated: the call's time is up, not a fault of the guest's code.
                self._fail(budget.timeout_error("wasmext_alloc during host_call"))
            self._fail(GuestTrap(f"trap inside wasmext_alloc during host_call: "
                                 f"{first_line(exc)}",
                                 plugin_id=self.ctx.plugin_id, hook=self.ctx.hook))
        if out and out + size <= memory.known:  # `write`, inline: the region is known
            memory.view[out:out + size] = answer
        elif out and not memory.write(out, answer):
            self._fail(InvalidOutput(f"wasmext_alloc returned {out:#x}, outside memory",
                                     plugin_id=self.ctx.plugin_id, hook=self.ctx.hook))
        budget.check_time(delivering)
        return (out << 32) | size if out else 0

    def on_log(self, level: int, ptr: int, length: int) -> None:
        """Keep the guest's log line (truncated), charged as a host call."""
        self.budget.charge_host_call()
        text = self.memory.read_guest(ptr, min(length, self.limits.max_log_line_bytes))
        if text is None:
            self._fail(InvalidOutput(f"log text ptr {ptr:#x} len {length} is outside memory",
                                     plugin_id=self.ctx.plugin_id, hook=self.ctx.hook))
        assert text is not None
        self.ctx.log.append(level, text)

    def fuel_left(self) -> int:
        """The fuel left in the store."""
        return self.store.get_fuel()
