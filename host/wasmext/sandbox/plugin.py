"""A loaded plugin: its registration, a pool of instances, and its fault record.

Instances are pooled so concurrent callers never share one; a faulted
instance is thrown away (its memory may be half-written) and the next call
gets a fresh one. Consecutive faults put the plugin in quarantine with an
exponential backoff; a clean call ends the streak.

Loading a plugin normally starts an instance to ask the guest what it registers.
A guest whose registration map depends only on its settings (an SDK's static
hook table, say) answers `"shareable": true`; then a later load of the same code
with the same settings, limits and grants takes that map from the module and
starts its first instance only when first called. That instance still registers,
and a map that differs from the shared one is an `InvalidOutput` fault: the
promise is checked, not trusted.
"""

from __future__ import annotations

import copy
import difflib
import logging
import threading
import time
import traceback
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from wasmext._abi import ABI_MAJOR, ABI_MINOR, HOOKS, REGISTRATION_KEYS
from wasmext._version import __version__
from wasmext.errors import (
    InstancePoolFull,
    InvalidOutput,
    MemoryLimitExceeded,
    PluginError,
    PluginFault,
    Quarantined,
    Timeout,
    UnknownHook,
    WasmextError,
)
from wasmext.sandbox.codec import encode
from wasmext.sandbox.engine import SharedEngine
from wasmext.sandbox.faults import chained, detached
from wasmext.sandbox.hostcalls import CallContext, HostServices
from wasmext.sandbox.instance import CallResult, PluginInstance
from wasmext.sandbox.limits import Limits
from wasmext.sandbox.module import PluginModule
from wasmext.sandbox.pluginlog import PluginLog
from wasmext.text import clean

__all__ = ["CALL_LIMITS", "MAX_HOOKS", "MAX_REGISTRATION_VALUES", "MAX_SHARED", "HookSpec",
           "Plugin", "QuarantinePolicy", "Registration"]

log = logging.getLogger(__name__)

MAX_SHARED = 64  # distinct (settings, limits, grants) per module whose registration is kept


def _shared_registration(module: object, key: str) -> dict[str, Any] | None:
    table: dict[str, dict[str, Any]] | None = getattr(module, "registrations", None)
    return None if table is None else table.get(key)


def _share_registration(module: object, key: str, raw: dict[str, Any]) -> None:
    table: dict[str, dict[str, Any]] | None = getattr(module, "registrations", None)
    if table is not None and (key in table or len(table) < MAX_SHARED):
        table[key] = raw


MAX_HOOKS = 256  # hook entries in one registration map
# Keys, items and values in one registration map, all levels together. The map is kept
# decoded for as long as the plugin is loaded (and shared ones with the module): a
# 1 MB map of a million empty arrays kept 70 MiB per plugin, under `max_output_bytes`.
MAX_REGISTRATION_VALUES = 65_536
# The limits one hook call may be given apart from the load's (`Plugin.set_call_limits`):
# the others (memory, tables, ...) belong to the instance, whatever it runs.
CALL_LIMITS = ("fuel_per_call", "timeout_ms")


@dataclass(frozen=True)
class HookSpec:
    """One hook a plugin registers, with its priority and tag pattern."""

    hook: str
    priority: int = 50
    pattern: str | None = None


def _typo_of_a_host_hook(name: str) -> str | None:
    """The host hook `name` nearly spells, when it is not one: `on_plain_txt` ->
    `on_plain_text`. A name far from all of them is the plugin's own (`greet`)."""
    if name in HOOKS or len(name) > 128:
        return None
    close = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.8)
    return close[0] if close else None


@dataclass(frozen=True)
class Registration:
    """What the guest's wasmext_register answered, validated."""

    hooks: tuple[HookSpec, ...]
    abi_minor: int = 0
    name: str | None = None
    version: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # The guest's promise that this map depends on nothing but the request's
    # settings and ABI (not the plugin id): copies of the module may reuse it.
    shareable: bool = False
    # Payload codecs besides MessagePack the guest reads and writes (SPEC 8: "json").
    codecs: tuple[str, ...] = ()
    # (ptr, size) of the guest's area for host_call answers (SPEC 1.4.1); None:
    # every answer goes through wasmext_alloc.
    answer_region: tuple[int, int] | None = None

    @property
    def hook_names(self) -> tuple[str, ...]:
        """The names of the registered hooks, in order."""
        return tuple(h.hook for h in self.hooks)

    @classmethod
    def parse(cls, reg: dict[str, Any], plugin_id: str,
              default_priority: int = 50) -> Registration:
        """Check a guest's registration map; InvalidOutput names what is wrong."""
        def bad(why: str) -> InvalidOutput:
            return InvalidOutput(f"registration map: {why}", plugin_id=plugin_id, hook="register")

        values = _values_in(reg, MAX_REGISTRATION_VALUES)
        if values > MAX_REGISTRATION_VALUES:
            raise bad(f"over {MAX_REGISTRATION_VALUES} values (keys, items and values of "
                      "every level together)")
        hooks_raw = reg.get("hooks")
        if not isinstance(hooks_raw, list):
            raise bad("'hooks' must be an array")
        # Each entry is a call the host makes per event, each with a fresh budget: a hook
        # listed 50,000 times was called 50,000 times per on_plain_text.
        if len(hooks_raw) > MAX_HOOKS:
            raise bad(f"{len(hooks_raw)} hooks; at most {MAX_HOOKS}")
        hooks = []
        seen: set[tuple[str, str | None]] = set()
        for i, h in enumerate(hooks_raw):
            if not isinstance(h, dict) or not isinstance(h.get("hook"), str) or not h["hook"]:
                raise bad(f"hooks[{i}] must be a map with a non-empty string 'hook'")
            prio = h.get("priority", default_priority)
            if type(prio) is not int or not 0 <= prio <= 100:
                raise bad(f"hooks[{i}].priority must be an int 0-100")
            pattern = h.get("pattern")
            if pattern is not None and not isinstance(pattern, str):
                raise bad(f"hooks[{i}].pattern must be a string")
            typo = _typo_of_a_host_hook(h["hook"])
            if typo is not None:
                raise UnknownHook(
                    f"registration map: hooks[{i}] is {clean(h['hook'], 128)!r}, which the host "
                    f"never calls; did you mean {typo!r}? (a hook the host calls: "
                    f"{', '.join(sorted(HOOKS))})", plugin_id=plugin_id, hook="register")
            # Guest text that operators see (inspect, list, traces): inert and bounded.
            spec = HookSpec(clean(h["hook"], 128), prio,
                            None if pattern is None else clean(pattern, 256))
            if (spec.hook, spec.pattern) in seen:
                raise bad(f"hooks[{i}] repeats {spec.hook!r}"
                          + (f" with pattern {spec.pattern!r}" if spec.pattern else ""))
            seen.add((spec.hook, spec.pattern))
            hooks.append(spec)
        minor = reg.get("abi_minor", 0)
        if type(minor) is not int or minor < 0:
            raise bad("'abi_minor' must be a non-negative int")
        name, version = reg.get("name"), reg.get("version")
        if name is not None and not isinstance(name, str):
            raise bad("'name' must be a string")
        if version is not None and not isinstance(version, str):
            raise bad("'version' must be a string")
        shareable = reg.get("shareable", False)
        if type(shareable) is not bool:
            raise bad("'shareable' must be a boolean")
        codecs = reg.get("codecs", [])
        if not isinstance(codecs, list) or len(codecs) > 16 or \
                not all(isinstance(c, str) for c in codecs):
            raise bad("'codecs' must be an array of at most 16 strings")
        known = {"hooks", "abi_minor", "name", "version", "shareable", "codecs"}
        region = None
        # Below the minor that gave it meaning the key is an unknown one, kept and
        # ignored, exactly as an older host treated it.
        if min(ABI_MINOR, minor) >= REGISTRATION_KEYS["answer_region"] and \
                "answer_region" in reg:
            region = _answer_region(reg["answer_region"])
            if region is None:
                raise bad("'answer_region' must be a map of an int 'ptr' (1 or more) and an "
                          "int 'size' (1 or more), ptr + size within 4 GiB")
            known.add("answer_region")
        extra = {k: v for k, v in reg.items() if k not in known}
        return cls(tuple(hooks), minor, None if name is None else clean(name, 128),
                   None if version is None else clean(version, 64), extra, shareable,
                   tuple(clean(c, 32) for c in codecs), region)


def _values_in(value: dict[str, Any], most: int) -> int:
    """How many keys, items and values `value` holds at every level, counted until
    over `most`: each container's length, level by level (never recursing)."""
    count = 0
    level: list[Any] = [value]
    while level and count <= most:
        count += sum(len(c) * 2 if isinstance(c, dict) else len(c) for c in level)
        if count > most:
            break
        level = [x for c in level for x in (c.values() if isinstance(c, dict) else c)
                  if isinstance(x, (dict, list, tuple))]
    return count


_ADDRESS_SPACE = 1 << 32  # wasm32: every address and length is below this


def _answer_region(raw: Any) -> tuple[int, int] | None:
    """A registration's `answer_region` as (ptr, size), or None when malformed. Only its
    shape is checked here: whether it lies inside the memory is checked at every answer,
    against the memory's size then (it may grow into the area later)."""
    if type(raw) is not dict or set(raw) != {"ptr", "size"}:
        return None
    ptr, size = raw["ptr"], raw["size"]
    if type(ptr) is not int or type(size) is not int or ptr < 1 or size < 1 or \
            ptr + size > _ADDRESS_SPACE:
        return None
    return ptr, size


# A full pool is said in the log at most this often (with how many were refused since):
# the callers are told each time, the operator once, whatever the rate of refusals.
POOL_FULL_LOG_EVERY_S = 10.0


class _PoolFullNotes:
    """When the log last said the pool was full, and the refusals since."""

    lock = threading.Lock()
    said_at: float | None = None
    refused = 0


def _note_pool_full(plugin_id: str, slots: int) -> None:
    """Tell the operator the engine's pool is full (the host's limit: theirs to raise)."""
    now = time.monotonic()
    with _PoolFullNotes.lock:
        _PoolFullNotes.refused += 1
        said = _PoolFullNotes.said_at
        if said is not None and now - said < POOL_FULL_LOG_EVERY_S:
            return
        refused, _PoolFullNotes.refused, _PoolFullNotes.said_at = _PoolFullNotes.refused, 0, now
    log.warning("instance pool full: %d instance%s refused, the latest for plugin %s: more "
                "instances alive at once than [host] instance_pool (%d)", refused,
                "" if refused == 1 else "s", clean(plugin_id, 128), slots,
                extra={"plugin_id": plugin_id, "outcome": "instance pool full"})


# Every plugin made, so that a full pool can take back idle instances (weakly: a plugin
# dropped leaves it).
_PLUGINS: weakref.WeakSet[Plugin] = weakref.WeakSet()


def _drop_idle(engine: SharedEngine) -> int:
    """Drop the idle instances of every plugin on `engine`: kept only to spare a later
    call its start-up, they give their slots to a call that needs one now (else one
    plugin's burst of calls kept its slots idle for good, and the others' calls were
    refused). How many were dropped."""
    dropped = 0
    for plugin in list(_PLUGINS):
        if plugin.module.engine is not engine:
            continue
        idle = plugin._idle
        while idle:
            try:
                idle.pop()  # atomic: a caller borrowing at the same moment gets another
            except IndexError:
                break
            dropped += 1
    return dropped


def _forget_frames(err: BaseException) -> None:
    """Drop the local variables of the finished frames `err` and the exceptions it
    was raised from passed through (their lines stay for a traceback)."""
    for exc in chained(err):
        traceback.clear_frames(exc.__traceback__)


def _name_unregistered(err: PluginError, hook: str, hooks: tuple[str, ...]) -> None:
    """A call of a hook the plugin does not register, said so with the hooks it does: the
    guest SDKs answer it `unhandled`, often with no message, and a plugin's own test or
    `wasmext call` of a misspelt hook showed that and nothing else."""
    if err.code != "unhandled" or hook in hooks:
        return  # a registered hook's own `unhandled` answer is the plugin's to word
    distinct = list(dict.fromkeys(hooks))  # the plugin's names: describe() cleans them
    names = ", ".join(distinct[:12]) + (f" and {len(distinct) - 12} more"
                                        if len(distinct) > 12 else "") or "none"
    err.message = f"the plugin registers no hook {hook!r} (its hooks: {names})" + \
        (f"; it said: {err.message}" if err.message else "")
    err.args = (err.message,)


def _host_trouble(ctx: CallContext, excuse: WasmextError) -> WasmextError:
    """`excuse` (the host's storage trouble the call met) to raise, and the context's
    note of it cleared. It was raised and caught inside the host call: its frames, and
    every frame above them, would keep the instance that made the call (from its context
    too, a cycle), for as long as the application keeps the error."""
    ctx.host_fault = ctx.slow = None
    return detached(excuse)


@dataclass(frozen=True)
class QuarantinePolicy:
    """After `max_faults` faults in a row, refuse calls for `cooldown_s`, doubling each time."""

    max_faults: int = 5
    cooldown_s: float = 1.0
    max_cooldown_s: float = 300.0


class Plugin:
    """A plugin ready to call. Thread-safe: each call borrows its own instance."""

    # What `new_instance` starts; another backend (components) names its own.
    instance_type: type[PluginInstance] = PluginInstance

    def __init__(self, module: PluginModule, *, plugin_id: str, limits: Limits | None = None,
                 settings: Mapping[str, Any] | None = None, sensitive: frozenset[str] = frozenset(),
                 grants: frozenset[str] = frozenset(), services: HostServices | None = None,
                 quarantine: QuarantinePolicy | None = None, max_idle: int = 4,
                 default_priority: int = 50) -> None:
        self.id = plugin_id
        self.module = module
        self.limits = limits or Limits()
        # What the manifest asked for (the loader sets it); `limits` is what it got.
        self.requested_limits: dict[str, int] = {}
        self.settings = dict(settings or {})
        self.sensitive = sensitive
        self.grants = grants
        self.services = services or HostServices()
        self.quarantine = quarantine or QuarantinePolicy()
        self.max_idle = max_idle
        self.default_priority = default_priority
        self.meter = False  # report fuel per call in CallResult.fuel (the Host turns it on)
        # set_call_limits: hook calls' fuel and deadline, not start-up's
        self.call_limits: dict[str, int] = {}
        self._limits_dict = self.limits.as_dict()
        secrets = [str(v) for k, v in self.settings.items() if k in sensitive and v is not None]
        self.log = PluginLog(plugin_id, self.limits.max_log_lines, self.limits.max_log_line_bytes,
                             secrets)
        self.calls = 0
        self.faults = 0
        self.last_fault: PluginFault | None = None
        self._streak = 0
        self._cooldown = self.quarantine.cooldown_s
        self._quarantined_until = 0.0
        self._idle: list[PluginInstance] = []
        _PLUGINS.add(self)  # a full pool takes back its idle instances (`_drop_idle`)
        # Every instance alive, idle or mid-call: a grant change reaches them all.
        self._instances: weakref.WeakSet[PluginInstance] = weakref.WeakSet()
        self._lock = threading.Lock()
        self.registration: Registration
        self._parsed_raw: dict[str, Any] | None = None  # the map `registration` came from
        # The packed registration request, with the settings, sensitive names and id
        # it was made of (`_register_payload`).
        self._register_packed: tuple[bytes, dict[str, Any], frozenset[str], str] | None = None
        for minimum in module.info.table_minimums:
            if minimum > self.limits.table_elements:
                raise MemoryLimitExceeded(
                    f"{module.name}: declares a table of {minimum} elements, over "
                    f"table_elements {self.limits.table_elements}", plugin_id=plugin_id,
                    hook="register")
        self._promised = _shared_registration(module, self._sharing_key())
        if self._promised is None:
            self._release(self.new_instance())
        else:  # a copy: its first instance starts at its first call, and must agree
            self.registration = Registration.parse(self._promised, plugin_id, default_priority)

    # -- instances -----------------------------------------------------------------

    def _context(self) -> CallContext:
        return CallContext(self.id, self.grants, self.settings, self.sensitive, self.log,
                           ABI_MINOR, self._limits_dict)

    def register_request(self) -> dict[str, Any]:
        """The request sent to wasmext_register: ABI, host, plugin id and public settings."""
        public = {k: v for k, v in self.settings.items() if k not in self.sensitive}
        return {"abi": {"major": ABI_MAJOR, "minor": ABI_MINOR},
                "host": {"name": "wasmext", "version": __version__},
                "plugin": {"id": self.id}, "settings": public}

    def _register_payload(self) -> bytes:
        """`register_request()` packed, packed again only when what it is made of
        changed: comparing the settings costs less than building and packing it."""
        made = self._register_packed
        if made is not None and made[1] == self.settings and made[2] is self.sensitive \
                and made[3] == self.id:
            return made[0]
        # A deep copy: a setting's list changed in place is a change as well.
        packed = encode(self.register_request())
        self._register_packed = (packed, copy.deepcopy(self.settings), self.sensitive, self.id)
        return packed

    def _sharing_key(self) -> str:
        """What a shareable registration may depend on, besides the code."""
        public = {k: v for k, v in self.settings.items() if k not in self.sensitive}
        return repr((public, self._limits_dict, sorted(self.grants), self.instance_type.__name__))

    def _instantiate(self) -> PluginInstance:
        """An instance of the module, not yet started; when the engine's pool is full,
        the idle instances of every plugin on the engine give their slots back first."""
        try:
            return self._instance_in_a_slot()
        except InstancePoolFull:
            if not _drop_idle(self.module.engine):
                _note_pool_full(self.id, self.module.engine.config.instance_pool)
                raise
        try:
            return self._instance_in_a_slot()
        except InstancePoolFull:
            _note_pool_full(self.id, self.module.engine.config.instance_pool)
            raise

    def _instance_in_a_slot(self) -> PluginInstance:
        """`instance_type` made for this plugin; a failure keeps nothing of it."""
        try:
            return self.instance_type(self.module, self.limits, self._context(),
                                      self.services)
        except WasmextError as err:
            _forget_frames(err)  # the half-made instance's store and slot go now
            raise

    def new_instance(self) -> PluginInstance:
        """A fresh, registered instance (faults here count like call faults)."""
        inst = self._instantiate()
        inst.meter = self.meter
        with self._lock:
            self._instances.add(inst)
            inst.ctx.grants = self.grants  # a set_grants while it was being made
        try:
            raw = inst.start(self._register_payload())
            if self._promised is not None and raw != self._promised:
                raise InvalidOutput("registration map differs from the one its module declared "
                                    "shareable", plugin_id=self.id, hook="register")
            # The pool's next instance answers as the last did (the very map, when its
            # bytes were the same: PluginInstance.start).
            if raw is self._parsed_raw or raw == self._parsed_raw:
                reg = self.registration
            else:
                reg = Registration.parse(raw, self.id, self.default_priority)
                if reg.shareable:
                    _share_registration(self.module, self._sharing_key(), raw)
                self._parsed_raw = raw
        except BaseException as err:
            # Whatever went wrong (a fault, a registration refused as UnknownHook or
            # AbiMismatch): the error may be kept (Host.load_errors), the instance not.
            del inst
            _forget_frames(err)
            if isinstance(err, PluginFault):
                self._record_fault(err)
            raise
        if self.call_limits:
            inst.set_call_limits(**self.call_limits)
        inst.ctx.abi_minor = min(ABI_MINOR, reg.abi_minor)
        if reg.answer_region is not None:
            inst.answer_region = reg.answer_region
        self.registration = reg
        return inst

    def _borrow(self) -> PluginInstance:
        # list.pop and list.append are atomic under the GIL: no lock on the hot path.
        try:
            return self._idle.pop()
        except IndexError:
            return self.new_instance()

    def _release(self, inst: PluginInstance) -> None:
        if len(self._idle) < self.max_idle:
            self._idle.append(inst)

    # -- faults --------------------------------------------------------------------

    @property
    def quarantined(self) -> bool:
        """True while calls to the plugin are refused."""
        return time.monotonic() < self._quarantined_until

    @property
    def quarantine_left_s(self) -> float:
        """Seconds until calls are taken again; 0.0 when the plugin is not quarantined."""
        return max(0.0, self._quarantined_until - time.monotonic())

    def _refuse_quarantined(self, hook: str) -> Quarantined:
        """The refusal of a call during the quarantine, saying how long it still lasts."""
        left = self.quarantine_left_s
        last = self.last_fault.reason if self.last_fault else "?"
        return Quarantined(f"plugin {self.id} is quarantined for {left:.1f} s more after "
                           f"repeated faults (last: {last})", plugin_id=self.id, hook=hook,
                           seconds_left=left)

    def _record_fault(self, fault: PluginFault) -> None:
        with self._lock:
            self.faults += 1
            self._streak += 1
            # A copy without the traceback: the fault goes on up the stack, and its frames
            # would keep what every frame above held (a calling plugin's instance, when
            # this was a tool it called) for as long as this plugin faults no more.
            self.last_fault = copy.copy(fault)
            if self._streak >= self.quarantine.max_faults:
                self._quarantined_until = time.monotonic() + self._cooldown
                self._cooldown = min(self._cooldown * 2, self.quarantine.max_cooldown_s)
                self._streak = 0

    def _record_success(self) -> None:
        if self._streak:
            with self._lock:
                self._streak = 0
                self._cooldown = self.quarantine.cooldown_s

    def set_grants(self, grants: frozenset[str]) -> None:
        """Change the capabilities; every instance, mid-call too, sees it at its next host call.

        A change of folder grants (`fs:`) also drops the idle instances: a guest's libc
        learns its preopened folders once, when the instance starts."""
        with self._lock:
            folders = {g for g in self.grants if g.startswith("fs:")}
            self.grants = grants
            live = list(self._instances)
            if folders != {g for g in grants if g.startswith("fs:")}:
                self._idle.clear()
        for inst in live:
            inst.ctx.grants = grants

    def set_call_fuel(self, fuel: int) -> None:
        """Give each hook call `fuel` units from now on (`set_call_limits`)."""
        self.set_call_limits(fuel_per_call=fuel)

    def set_call_limits(self, **changes: int) -> None:
        """Hold each hook call to `changes` from now on (`fuel_per_call`, `timeout_ms`);
        every instance's start-up and registration keep the load's limits (`wasmext call
        --fuel` and `--timeout-ms` bound the call asked for, not the load). Set them
        before calls start: a call already running keeps the limits it began with."""
        unknown = sorted(set(changes) - set(CALL_LIMITS))
        if unknown:
            raise TypeError(f"{unknown[0]!r} is no call limit; call limits: "
                            f"{', '.join(CALL_LIMITS)}")
        self.limits.replace(**changes)  # a bad value is a ValueError here, not per instance
        with self._lock:
            self.call_limits = {**self.call_limits, **changes}
            live = list(self._instances)
        for inst in live:
            inst.set_call_limits(**changes)

    def release_quarantine(self) -> None:
        """End a quarantine now (an operator's decision)."""
        with self._lock:
            self._quarantined_until = 0.0
            self._streak = 0

    # -- calls ---------------------------------------------------------------------

    def call(self, hook: str, data: Any = None, meta: dict[str, Any] | None = None) -> CallResult:
        """Run `hook` with `data`. Raises PluginFault subclasses (the instance is
        discarded), PluginError (the guest said no), Quarantined, InputTooLarge."""
        if self._quarantined_until and self.quarantined:
            raise self._refuse_quarantined(hook)
        inst = self._borrow()
        inst.meter = self.meter
        self.calls += 1
        ctx = inst.ctx
        ctx.session = meta.get("session") if meta else None
        try:
            result = inst.call(hook, data, meta)
        except PluginFault as fault:
            # Thrown away, and this thread's alone: its files close now, not at a GC.
            inst.release_files()
            # Its store and slot go now too: the fault's frames would hold the instance
            # (and its memory, and a slot of the engine's pool) for as long as the fault
            # is kept, and until a collection when it is part of a cycle.
            del inst
            _forget_frames(fault)
            if ctx.pending:
                ctx.finish(False)  # a faulted call's state writes never happened
            excuse = ctx.host_fault or (ctx.slow if isinstance(fault, Timeout) else None)
            if excuse is not None:
                # The host's storage failed the call: not the plugin's fault. The
                # instance trapped mid-call, so it is not reused, but nothing counts.
                raise _host_trouble(ctx, excuse) from fault
            if not getattr(fault, "inherited", False):  # the caller's time ran out, not ours
                self._record_fault(fault)
            raise
        except BaseException as err:
            if ctx.pending:
                ctx.finish(False)
            # Read before the instance goes back: another caller's call resets it.
            excuse = ctx.host_fault if isinstance(err, PluginError) else None
            if excuse is not None:
                excuse = _host_trouble(ctx, excuse)
            self._release(inst)
            # The error (a PluginError the application keeps) holds no instance: one
            # the idle list had no room for is dropped now.
            del inst
            _forget_frames(err)
            if excuse is not None:
                raise excuse from err  # the plugin passed the storage failure on
            if isinstance(err, PluginError):
                _name_unregistered(err, hook, self.registration.hook_names)
            raise
        try:
            if ctx.pending:
                ctx.finish(True)  # may refuse (a state commit): then the call failed
        finally:
            self._release(inst)
            del inst  # a refused commit's error, kept, holds no instance
        self._record_success()
        return result

    def with_limits(self, limits: Limits) -> Plugin:
        """The same code and settings under other limits (a new instance pool)."""
        return type(self)(self.module, plugin_id=self.id, limits=limits,
                          settings=self.settings, sensitive=self.sensitive, grants=self.grants,
                          services=self.services, quarantine=replace(self.quarantine),
                          max_idle=self.max_idle, default_priority=self.default_priority)

    def close(self) -> None:
        """Drop the idle instances; the next call starts a fresh one."""
        with self._lock:
            self._idle.clear()

    def describe(self) -> dict[str, Any]:
        """The plugin's id, registration, module, limits and grants, for operators."""
        reg = self.registration
        return {
            "id": self.id,
            "name": reg.name,
            "version": reg.version,
            "abi": {"major": ABI_MAJOR, "minor": min(ABI_MINOR, reg.abi_minor),
                    "guest_minor": reg.abi_minor},
            "hooks": [{"hook": h.hook, "priority": h.priority, "pattern": h.pattern}
                      for h in reg.hooks],
            "codecs": list(reg.codecs),
            # The area host-call answers are written into (ABI minor 3); None: none.
            "answer_region": None if reg.answer_region is None else
            {"ptr": reg.answer_region[0], "size": reg.answer_region[1]},
            "extra": dict(reg.extra),
            "size": self.module.info.size,
            "digest": f"sha256:{self.module.info.digest}",
            "imports": [f"{m}.{n}" for m, n in self.module.info.imports],
            "wasi": self.module.info.uses_wasi,
            "limits": {"requested": dict(self.requested_limits),
                       "effective": self.limits.as_dict()},
        }
