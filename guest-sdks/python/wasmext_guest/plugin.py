"""Layer 3: the plugin interface: a class with do-nothing defaults and hook decorators.

    class Hello(Plugin):
        name = "hello"

        @hook("greet")
        def greet(self, data):
            return f"{config('greeting', 'Hello')}, {data}!"

    WitWorld = export(Hello())   # componentize-py looks for `WitWorld`

A handler returns the new value; `UNCHANGED` passes the input on, `Stop(value)`
ends the chain, raising `Fail(code, message)` (or a `HostError`) answers an error
map. Any other exception answers `failed` with its text: a guest bug must not
trap the instance. MemoryError is the exception: it traps (the host then
reports MemoryLimitExceeded and starts a fresh instance).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wasmext_guest.host import HostError
from wasmext_guest.msgpack import MsgpackError, pack, pack_answer, unpack, unpack_call
from wasmext_guest.world import ABI_MINOR, note_registration

__all__ = ["UNCHANGED", "Call", "Fail", "Plugin", "Stop", "export", "hook"]

UNCHANGED: Any = object()
_HOOK_ATTR = "__wasmext_hooks__"


class Fail(Exception):
    """Answer the call with the ABI error `code` (e.g. "invalid", "failed")."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(message or code)
        self.code = code
        self.message = message


@dataclass
class Stop:
    """Answer `value` (UNCHANGED: the input) and stop the hook chain."""

    value: Any = UNCHANGED


@dataclass
class Call:
    """The call a handler is running: its hook, data and meta."""

    hook: str
    data: Any
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Hook:
    name: str
    priority: int | None
    pattern: str | None
    method: str


def hook(name: str, *, priority: int | None = None,
         pattern: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated method for hook `name` (priority 0..100, tag pattern)."""
    if priority is not None and not 0 <= priority <= 100:
        raise ValueError(f"hook {name}: priority must be 0..100")

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        marks = list(getattr(fn, _HOOK_ATTR, ()))
        marks.append((name, priority, pattern))
        setattr(fn, _HOOK_ATTR, marks)
        return fn
    return mark


class Plugin:
    """Subclass it, set `name` and `version`, decorate methods with `@hook`."""

    name: str | None = None
    version: str | None = None
    abi_minor = ABI_MINOR

    def __init__(self) -> None:
        # The running call's (hook, data, meta) as read from its request; its `Call`
        # is made only when something asks for it (most handlers never do).
        self._running: tuple[Any, Any, Any] | None = None
        self._made: Call | None = None
        self.settings: dict[str, Any] = {}
        hooks = []
        for cls in reversed(type(self).__mro__):
            for attr, fn in vars(cls).items():
                for name, priority, pattern in getattr(fn, _HOOK_ATTR, ()):
                    hooks.append(_Hook(name, priority, pattern, attr))
        self._hooks = tuple(hooks)
        # Each call looks its hook up by name (registration order kept within a name).
        self._by_name: dict[str, list[_Hook]] = {}
        for h in self._hooks:
            self._by_name.setdefault(h.name, []).append(h)
        # A hook with one handler and no pattern, as most are: its bound method.
        self._direct: dict[str, Callable[[Any], Any]] = {
            name: getattr(self, hs[0].method) for name, hs in self._by_name.items()
            if len(hs) == 1 and hs[0].pattern is None}

    @property
    def call(self) -> Call | None:
        """The call a handler is running: its hook, data and meta (None between calls)."""
        fields = self._running
        if fields is None:
            return None
        made = self._made
        if made is None:
            hook_name, data, meta = fields
            made = self._made = Call(hook_name if isinstance(hook_name, str) else "", data,
                                     meta if isinstance(meta, dict) else {})
        return made

    # -- what a plugin may override (each default does nothing) -------------------

    def extra(self) -> dict[str, Any]:
        """Extra registration entries, such as "prompt" or "tools" (docs/hooks.md)."""
        return {}

    def on_register(self, request: dict[str, Any]) -> None:
        """Called once with the registration request (public settings in `settings`)."""

    def unhandled(self, call: Call) -> Any:
        """A call of a hook this plugin did not register."""
        raise Fail("unhandled", f"no handler for hook {call.hook}")

    # -- the ABI, done by the SDK -------------------------------------------------

    def registration(self) -> dict[str, Any]:
        reg: dict[str, Any] = {"hooks": [], "abi_minor": self.abi_minor}
        for h in self._hooks:
            entry: dict[str, Any] = {"hook": h.name}
            if h.priority is not None:
                entry["priority"] = h.priority
            if h.pattern is not None:
                entry["pattern"] = h.pattern
            reg["hooks"].append(entry)
        if self.name is not None:
            reg["name"] = self.name
        if self.version is not None:
            reg["version"] = self.version
        reg.update(self.extra())
        return reg

    def _handler(self, call: Call) -> Callable[[Any], Any] | None:
        candidates = self._by_name.get(call.hook, ())
        if len(candidates) == 1 and candidates[0].pattern is None:
            handler: Callable[[Any], Any] = getattr(self, candidates[0].method)
            return handler
        subject = call.data.get("tag", call.data.get("name")) if isinstance(call.data, dict) \
            else None
        for h in candidates:
            if h.pattern is None or (isinstance(subject, str) and _matches(h.pattern, subject)):
                found: Callable[[Any], Any] = getattr(self, h.method)
                return found
        return None

    def handle(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """One call request in, its response map out (None: unchanged)."""
        plain, answer = self._outcome((request.get("hook"), request.get("data"),
                                       request.get("meta")))
        return {"ok": True, "value": answer} if plain else answer

    def _outcome(self, fields: tuple[Any, Any, Any]) -> tuple[bool, Any]:
        """(True, value) for a handler's new value, else (False, the response map or
        None for unchanged): the common answer is written without a map around it.
        `fields`: the request's (hook, data, meta), as read."""
        hook_name = fields[0]
        self._running = fields
        try:
            direct = self._direct.get(hook_name) if type(hook_name) is str else None
            if direct is not None:
                value = direct(fields[1])
            else:
                call = self.call
                assert call is not None
                handler = self._handler(call)
                value = handler(call.data) if handler is not None else self.unhandled(call)
        except (Fail, HostError) as err:
            return False, {"ok": False, "error": {"code": err.code, "message": err.message}}
        except MemoryError:
            raise  # at the host's memory cap: trap, so the host discards this instance
        except Exception as exc:
            return False, {"ok": False, "error": {"code": "failed",
                                                  "message": f"{type(exc).__name__}: {exc}"}}
        finally:
            self._running = None
            if self._made is not None:  # made for this call only (it holds its data)
                self._made = None
        if value is UNCHANGED:
            return False, None
        if isinstance(value, Stop):
            if value.value is UNCHANGED:
                return False, {"ok": True, "stop": True}
            return False, {"ok": True, "value": value.value, "stop": True}
        return True, value


def _matches(pattern: str, subject: str) -> bool:
    if pattern.endswith("*"):
        return subject.startswith(pattern[:-1])
    return subject == pattern


def _encode_answer(answer: dict[str, Any] | None) -> bytes:
    if answer is None:
        return b""
    try:
        return pack(answer)
    except MsgpackError as exc:
        return _no_encoding(exc)


def _no_encoding(exc: MsgpackError) -> bytes:
    return pack({"ok": False, "error": {"code": "failed",
                                        "message": f"the answer has no encoding: {exc}"}})


_NOT_A_MAP = pack({"ok": False, "error": {"code": "invalid",
                                          "message": "the request is not a map"}})


def export(plugin: Plugin) -> type:
    """The class componentize-py exports as the world (assign it to `WitWorld`)."""
    own_handle = type(plugin).handle is not Plugin.handle

    def by_map(request: bytes) -> bytes:
        try:
            req = unpack(request)
        except MsgpackError as exc:
            return pack({"ok": False, "error": {"code": "invalid", "message": str(exc)}})
        if not isinstance(req, dict):
            return _NOT_A_MAP
        return _encode_answer(plugin.handle(req))

    class WitWorld:
        def register(self, request: bytes) -> bytes:
            req = unpack(request)
            note_registration(req if isinstance(req, dict) else {})
            settings = req.get("settings") if isinstance(req, dict) else None
            plugin.settings = dict(settings) if isinstance(settings, dict) else {}
            plugin.on_register(req if isinstance(req, dict) else {})
            return pack(plugin.registration())

        def call(self, request: bytes) -> bytes:
            if own_handle:  # a plugin that overrides handle() gets the request map
                return by_map(request)
            # The lean path: the request's three fields read in place, the handler's
            # value written behind the answer's fixed head; the bytes are pack(handle(req)).
            try:
                fields = unpack_call(request)
            except MsgpackError as exc:
                return pack({"ok": False, "error": {"code": "invalid", "message": str(exc)}})
            if fields is None:
                return _NOT_A_MAP
            plain, answer = plugin._outcome(fields)
            if not plain:
                return _encode_answer(answer)
            try:
                return pack_answer(answer)
            except MsgpackError as exc:
                return _no_encoding(exc)

    return WitWorld
