"""`host_call` dispatch: one table of ops, checked in the order SPEC.md 4.2 fixes.

An op handler takes the calling plugin's context and the request map and
returns a value, or raises OpError with an ABI error code. Nothing a guest
sends can make dispatch raise anything else: a handler bug answers `internal`
and is logged. Later features (state, events, tools, MCP) add handlers with
`HostServices.register`.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from wasmext._abi import ABI_MAJOR, ABI_MINOR, OPS
from wasmext.errors import CapabilityDenied, EncodeError, OpError, WasmextError
from wasmext.observe import tracing
from wasmext.sandbox.codec import DecodeError, decode, encode
from wasmext.sandbox.fsgrants import FsQuota
from wasmext.sandbox.pluginlog import PluginLog
from wasmext.text import clean

__all__ = ["DENIALS_PER_CALL", "CallContext", "DenialSeen", "HostServices", "KnownRequest",
           "OpError", "OpHandler", "denials_watched", "unwatch_denials", "watch_denials"]

log = logging.getLogger("wasmext.sandbox.hostcalls")

# Denials one watched call keeps (`denials_watched`): the first of each op, at most this
# many, so a plugin probing every op it can name sends its caller a few lines, not a flood.
DENIALS_PER_CALL = 4


class DenialSeen(NamedTuple):
    """One op a watched plugin was denied: the op, why (the plugin's secrets redacted,
    one inert line) and the grant that would allow it, when one alone would."""

    op: str
    message: str
    capability: str | None


class _Watch(threading.local):
    plugin_id: str | None = None
    seen: list[DenialSeen] | None = None


_watch = _Watch()


_Watched = tuple[str | None, list[DenialSeen] | None]


def watch_denials(plugin_id: str) -> tuple[list[DenialSeen], _Watched]:
    """`denials_watched` without a context manager (a worker's stage call, a hot path):
    the list that fills, and what `unwatch_denials` must be given when the call is over."""
    outer = _watch.plugin_id, _watch.seen
    seen: list[DenialSeen] = []
    _watch.plugin_id, _watch.seen = plugin_id, seen
    return seen, outer


def unwatch_denials(outer: _Watched) -> None:
    """Stop the watch `watch_denials` began (the one around it, if any, goes on)."""
    _watch.plugin_id, _watch.seen = outer


@contextmanager
def denials_watched(plugin_id: str) -> Iterator[list[DenialSeen]]:
    """The denials of `plugin_id`'s host calls on this thread while inside (a worker
    sends its caller those of the call it ran): every one, not only those the host's
    once-per-session log line reports, and of no other plugin it calls on the way."""
    seen, outer = watch_denials(plugin_id)
    try:
        yield seen
    finally:
        unwatch_denials(outer)


@dataclass
class CallContext:
    """What an op handler may know about the plugin that called it."""

    plugin_id: str
    grants: frozenset[str]
    settings: Mapping[str, Any]
    sensitive: frozenset[str]
    log: PluginLog
    abi_minor: int = ABI_MINOR
    limits: Mapping[str, int] = field(default_factory=dict)
    hook: str | None = None
    session: str | None = None
    # Seconds the current host call spent running other plugins (middleware next):
    # not charged to this plugin's host-call budget.
    nested_seconds: float = 0.0
    # Seconds the current host call spent waiting on host storage: not charged either.
    waited_seconds: float = 0.0
    waited_total: float = 0.0  # storage slowness over the whole hook call (services.state)
    # The hook call's deadline (time.monotonic()); 0.0 outside a call.
    deadline: float = 0.0
    # Host trouble during this call (state storage unavailable): a failure of the call
    # is then reported as this error, never as the plugin's fault. `slow` excuses only
    # a timeout (storage waits took a large share of the call's time).
    host_fault: WasmextError | None = None
    slow: WasmextError | None = None
    # Work an op left open until the hook call ends (a state transaction):
    # finish(True) after a successful call, finish(False) after any failure.
    pending: list[Callable[[bool], None]] = field(default_factory=list)

    def begin(self, deadline: float) -> None:
        """A hook call starts: its deadline, and nothing excused or waited yet."""
        self.deadline = deadline
        self.host_fault = self.slow = None
        self.waited_total = 0.0

    def finish(self, success: bool) -> None:
        """Finish the work ops left open, with the call's success."""
        pending, self.pending = self.pending, []
        for done in pending:
            done(success)

    def require(self, capability: str) -> None:
        """Raise CapabilityDenied unless the plugin holds the capability."""
        if capability and capability not in self.grants:
            raise CapabilityDenied(f"plugin {self.plugin_id} was not granted {capability!r}",
                                   plugin_id=self.plugin_id, hook=self.hook)


OpHandler = Callable[[CallContext, dict[str, Any]], Any]
# A request an instance decoded before (`HostServices.dispatch_packed`'s `known`):
# [op, the decoded map, the value its last answer carried, that answer's bytes]. The
# last two only ever pair a value with its own packing (`known_local`).
# A list, not a slotted class: on the host-call path the class measured about 1.4k
# more instructions per call (callgrind, `hostcall_cost.py --loop`), 1.5 % of the call.
KnownRequest = list[Any]


def _error(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message}}


class HostServices:
    """The op table. Ops not in abi.toml can be added as `x.<name>` extensions."""

    def __init__(self) -> None:
        self._handlers: dict[str, OpHandler] = {}
        # The bounds of every folder grant of the plugins served here (sandbox.wasifs).
        self.fs_quota = FsQuota()
        # Called with (plugin id, op) for every request naming a known op (metrics).
        self.observer: Callable[[str, str], None] | None = None
        self._capability = {op: cap for op, (cap, _since, _impl) in OPS.items()}
        self._since = {op: since for op, (_cap, since, _impl) in OPS.items()}
        # (session, plugin, op) denials already logged: once each, and a bounded memory
        # (oldest forgotten first), so a plugin probing in many sessions grows nothing.
        self._denials_logged: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._denials_lock = threading.Lock()
        # op -> (minor it needs, capability, handler or None): one lookup per host
        # call, rebuilt whenever the table changes.
        self._table: dict[str, tuple[int, str, OpHandler | None]] = {}
        # Ops served by the host's own in-memory handlers (`LOCAL_HANDLERS`): they never
        # wait on storage, call another plugin or leave the process.
        self.local_ops: frozenset[str] = frozenset()
        self.register("log", _op_log)
        self.register("config.get", _op_config_get)
        self.register("secret.get", _op_secret_get)
        self.register("abi.info", _op_abi_info)

    def register(self, op: str, handler: OpHandler, capability: str | None = None) -> None:
        """Install (or replace) the handler of `op`; `capability` defaults to the ABI table's."""
        if op not in self._capability and not op.startswith("x."):
            raise ValueError(f"op {op!r} is not in the ABI table; extension ops start with 'x.'")
        if capability is not None:
            self._capability[op] = capability
        self._handlers[op] = handler
        self._table = {name: (self._since.get(name, 0), cap, self._handlers.get(name))
                       for name, cap in self._capability.items()}
        self.local_ops = frozenset(name for name, fn in self._handlers.items()
                                   if fn in LOCAL_HANDLERS)

    def capability_of(self, op: str) -> str | None:
        """The grant `op` needs ("": none), or None for an op this table has not."""
        return self._capability.get(op)

    def handler(self, op: str) -> OpHandler | None:
        """The handler installed for `op` (None: none)."""
        return self._handlers.get(op)

    def dispatch(self, ctx: CallContext, request: bytes, max_depth: int) -> dict[str, Any]:
        """Run one request: the answer map, `{"ok": true, "value": ...}` or an error."""
        ok, out = self._run(ctx, request, max_depth)
        return {"ok": True, "value": out} if ok else out

    def dispatch_packed(self, ctx: CallContext, request: bytes, max_depth: int,
                        pack: Callable[[Any], bytes],
                        known: dict[bytes, KnownRequest] | None = None) -> bytes:
        """`encode(dispatch(...))` without building the answer map: the fixed head of
        `{"ok": true, "value": ` and `pack(value)` (a reusable `msgpack.Packer(
        use_bin_type=True).pack`; not shared between threads). Raises EncodeError
        for a value MessagePack cannot carry, as `encode` does.

        `known` (one instance's, one thread at a time) remembers small flat requests
        decoded before, by their bytes: a guest that asks the same thing again (the
        same `config.get`) is not decoded again. What it remembers is only ever the
        decoder's own result for those bytes; every check after decoding (ABI minor,
        grant, handler) runs on every call, and the handler gets a copy of the map."""
        hit = known.get(request) if known is not None else None
        if hit is not None:
            ok, out = self.checked(ctx, hit[0], dict(hit[1]))
        else:
            ok, out = self._run(ctx, request, max_depth, known)
        if not ok:
            return encode(out)
        try:
            return _OK_VALUE + pack(out)
        except (TypeError, ValueError, OverflowError) as exc:
            raise EncodeError(f"cannot encode as MessagePack: {exc}") from exc

    def known_local(self, ctx: CallContext, known: KnownRequest,
                    pack: Callable[[Any], bytes]) -> bytes:
        """`dispatch_packed` of a request found in `known` whose op is in `local_ops`.

        The op's table entry is looked up and its checks made here, in `checked`'s
        order; any check that does not pass, or a handler that fails, goes the
        general way (`checked` again, which answers it).

        The handler runs every time (settings, grants and handlers are read anew); only
        the packing of its value is remembered, with the value itself: when the handler
        returns the very object it returned last time for this request and that object
        is an immutable scalar (`config.get` of an unchanged setting), its bytes are the
        same and are not packed again. Answers over `KNOWN_ANSWER_BYTES` are not kept."""
        op = known[0]
        since, capability, handler = self._table[op]
        if since > ctx.abi_minor or (capability and capability not in ctx.grants) or \
                handler is None:
            ok, out = self.checked(ctx, op, dict(known[1]))
        else:
            if self.observer is not None:
                self.observer(ctx.plugin_id, op)
            try:
                # The map itself, no copy: only the built-in LOCAL_HANDLERS run here,
                # and they only read it.
                ok, out = True, handler(ctx, known[1])
            except Exception as exc:
                ok, out = self._failure(ctx, op, exc)
            else:
                if out is known[2]:  # kept alive by the entry: the same object, same bytes
                    return known[3]  # type: ignore[no-any-return]
        if not ok:
            return encode(out)
        try:
            answer = _OK_VALUE + pack(out)
        except (TypeError, ValueError, OverflowError) as exc:
            raise EncodeError(f"cannot encode as MessagePack: {exc}") from exc
        if type(out) in _IMMUTABLE and len(answer) <= KNOWN_ANSWER_BYTES:
            known[2], known[3] = out, answer
        return answer

    def _run(self, ctx: CallContext, request: bytes, max_depth: int,
             known: dict[bytes, KnownRequest] | None = None) -> tuple[bool, Any]:
        try:
            req = decode(request, max_depth)
        except DecodeError as exc:
            return False, _error("invalid", f"request is not a MessagePack map: {exc}")
        op = req.get("op") if type(req) is dict else None
        if not isinstance(op, str):
            return False, _error("invalid", "request must be a map with a string 'op'")
        if known is not None and len(request) <= KNOWN_REQUEST_BYTES and \
                len(known) < KNOWN_REQUESTS and len(req) <= KNOWN_REQUEST_FIELDS and \
                all(type(v) in _SCALARS for v in req.values()):
            # Scalars only: the copy each call gets shares nothing a handler could change.
            known[request] = [op, dict(req), _NOTHING, b""]
        return self.checked(ctx, op, req)

    def checked(self, ctx: CallContext, op: str, req: dict[str, Any]) -> tuple[bool, Any]:
        """SPEC 4.2's checks after decoding, in its order, then the op's handler: (True,
        its value) or (False, the error answer map)."""
        entry = self._table.get(op)
        if entry is None:
            return False, _error("unsupported", f"unknown op {op!r}")
        since, capability, handler = entry
        if since > ctx.abi_minor:
            # SPEC 3.1: an op newer than the negotiated minor is unknown to this guest,
            # so a minor-0 guest sees exactly what a minor-0 host answered.
            return False, _error("unsupported", f"op {op!r} needs ABI minor {since}; "
                                 f"the plugin negotiated {ctx.abi_minor}")
        if self.observer is not None:
            self.observer(ctx.plugin_id, op)
        if capability and capability not in ctx.grants:
            try:
                ctx.require(capability)
            except CapabilityDenied as exc:
                self._log_denial(ctx, op, exc, capability)
                return False, _error("denied", exc.message)
        if handler is None:
            return False, _error("unsupported", f"op {op!r} is not implemented by this host")
        if tracing.ACTIVE is not None and op in LEAVING_OPS and \
                not tracing.ACTIVE.unsampled():
            return self._traced(tracing.ACTIVE, handler, ctx, op, req)
        try:
            return True, handler(ctx, req)
        except Exception as exc:
            return self._failure(ctx, op, exc)

    def _traced(self, traced: tracing.Tracing, handler: OpHandler, ctx: CallContext, op: str,
                req: dict[str, Any]) -> tuple[bool, Any]:
        """The handler in a span: an op whose work leaves the sandbox (a request out, another
        plugin's tool, the model). What the guest named is cleaned and bounded."""
        attributes = {"wasmext.plugin_id": tracing.text(ctx.plugin_id), "wasmext.op": op}
        for field_name, attribute in _NAMED_BY_GUEST.get(op, ()):
            value = req.get(field_name)
            if isinstance(value, str):
                attributes[attribute] = tracing.text(_host_of(value) if field_name == "url"
                                                     else value)
        with traced.span(f"wasmext.op {op}", attributes, kind="client") as span:
            try:
                ok, out = True, handler(ctx, req)
            except Exception as exc:
                ok, out = self._failure(ctx, op, exc)
            # A tool's own failure is an answer the op carries ({"status": "error"}).
            failed_tool = ok and type(out) is dict and out.get("status") == "error"
            if ok and not failed_tool:
                span.set_attribute("wasmext.outcome", "ok")
                if type(out) is dict:
                    _note_answer(span, op, out)
            elif failed_tool:
                span.set_attribute("wasmext.outcome", "tool_error")
                error = out.get("error")
                traced.failed(span, str(error.get("message", "failed"))
                              if isinstance(error, dict) else "failed")
            else:
                error = out["error"]
                span.set_attribute("wasmext.outcome", tracing.text(error["code"], 64))
                traced.failed(span, error["message"])
            return ok, out

    def _failure(self, ctx: CallContext, op: str, exc: Exception) -> tuple[bool, Any]:
        """The error answer for a handler's exception (called while it is handled)."""
        if isinstance(exc, OpError):
            if exc.code == "denied":  # a pattern grant missing (http host, tool, agent, ...)
                self._log_denial(ctx, op, exc, exc.capability)
            return False, _error(exc.code, exc.message)
        if isinstance(exc, CapabilityDenied):
            self._log_denial(ctx, op, exc)
            return False, _error("denied", exc.message)
        log.exception("op %s failed inside the host (plugin %s)", op, ctx.plugin_id)
        return False, _error("internal", f"op {op!r} failed inside the host")

    def _log_denial(self, ctx: CallContext, op: str, exc: WasmextError,
                    capability: str | None = None) -> None:
        """A warning the first time a plugin is denied `op` in a session: an operator
        learns a grant is missing without a line per call. `capability` is the grant
        that would allow it, when one alone would (the record's `capability` field)."""
        seen = _watch.seen
        if seen is not None and ctx.plugin_id == _watch.plugin_id \
                and len(seen) < DENIALS_PER_CALL and all(d.op != op for d in seen):
            seen.append(DenialSeen(op, ctx.log.scrub(exc.message, 300), capability))
        self.note_denial(ctx.plugin_id, ctx.session, op, exc.message, capability)

    def note_denial(self, plugin_id: str, session: str | None, op: str, message: str,
                    capability: str | None = None, worker: str | None = None) -> None:
        """Log that `plugin_id` was denied `op` (on `worker`, when a worker ran the call),
        the first time in `session`: the operator's notice (`wasmext run` shows it)."""
        key = (session or "", plugin_id, op)
        with self._denials_lock:
            if key in self._denials_logged:
                return
            self._denials_logged[key] = None
            if len(self._denials_logged) > DENIALS_REMEMBERED:
                self._denials_logged.popitem(last=False)
        fields: dict[str, Any] = {"plugin_id": plugin_id, "session": session, "op": op,
                                  "capability": capability}
        where = ""
        if worker is not None:
            fields["worker"] = clean(worker, 64)
            where = f" on worker {fields['worker']}"
        if session:
            where += f" in session {clean(session, 128)}"
        # What the key above makes true, said as it is: one line per plugin and op (in each
        # session, when there is one); a command without a session says no session.
        log.warning("plugin %s was denied %s%s: %s (later denials of %s%s are not reported)",
                    plugin_id, op, where, clean(message, 300), op,
                    " in this session" if session else "", extra=fields)


DENIALS_REMEMBERED = 4096
# Requests one instance remembers decoded (`dispatch_packed`): how many, and how long
# each may be. A guest sending ever new requests fills it once and is then decoded as
# before; it never grows past this.
KNOWN_REQUESTS = 32
KNOWN_REQUEST_BYTES = 256
# ... and how many fields (the ops' requests have at most four): 256 bytes of one-letter
# fields decode to a map of ~80 entries, five times what the bytes cost the guest.
KNOWN_REQUEST_FIELDS = 8
_SCALARS = frozenset({str, int, float, bool, bytes, type(None)})
# Values whose packing a known request keeps (`known_local`): exactly these types, never
# a subclass (which could pack differently, or change), and answers of at most this size.
_IMMUTABLE = _SCALARS
KNOWN_ANSWER_BYTES = 256
_NOTHING = object()  # no answer kept yet: no handler value is this object
# Ops whose work leaves the sandbox: each gets a span while tracing is on (the others,
# state and log and config, are the hook call's own and stay in its span).
LEAVING_OPS = frozenset({"http.fetch", "llm.complete", "tool.call", "agents.request",
                         "agents.send", "resource.list", "resource.read", "prompt.list",
                         "prompt.get"})
# (request field, span attribute) a span names: plugin-chosen text, cleaned.
_NAMED_BY_GUEST: dict[str, tuple[tuple[str, str], ...]] = {
    "tool.call": (("name", "wasmext.tool"),),
    "http.fetch": (("method", "http.request.method"), ("url", "server.address")),
    "llm.complete": (("model", "gen_ai.request.model"),),
    "agents.request": (("agent", "wasmext.agent"),),
    "agents.send": (("agent", "wasmext.agent"),),
    "resource.list": (("server", "wasmext.mcp_server"),),
    "resource.read": (("server", "wasmext.mcp_server"),),
    "prompt.list": (("server", "wasmext.mcp_server"),),
    "prompt.get": (("server", "wasmext.mcp_server"), ("name", "wasmext.prompt")),
}


def _note_answer(span: Any, op: str, out: dict[str, Any]) -> None:
    """What an answer says that an operator looks for: an HTTP status, a model's tokens
    (numbers only: the host made them, or checked them, never plugin text)."""
    if op == "http.fetch" and type(out.get("status")) is int:
        span.set_attribute("http.response.status_code", out["status"])
    elif op == "llm.complete" and isinstance(out.get("usage"), dict):
        for key, attribute in (("input", "gen_ai.usage.input_tokens"),
                               ("output", "gen_ai.usage.output_tokens")):
            if type(out["usage"].get(key)) is int:
                span.set_attribute(attribute, out["usage"][key])


def _host_of(url: str) -> str:
    """A URL's host only: its path and query may carry a token."""
    from urllib.parse import urlsplit

    try:
        return urlsplit(url[:2048]).hostname or ""
    except ValueError:
        return ""
_OK_VALUE = b"\x82\xa2ok\xc3\xa5value"  # {"ok": true, "value": ... as MessagePack


_ALL = object()  # config.get without a key


def _str_arg(req: dict[str, Any], name: str) -> str:
    value = req.get(name)
    if not isinstance(value, str):
        raise OpError("invalid", f"'{name}' must be a string")
    return value


def _op_log(ctx: CallContext, req: dict[str, Any]) -> None:
    msg = req.get("msg")
    if isinstance(msg, str):
        raw = msg.encode("utf-8", errors="replace")
    elif isinstance(msg, bytes):
        raw = msg
    else:
        raise OpError("invalid", "'msg' must be a string")
    level = req.get("level", "info")
    if not isinstance(level, (str, int)) or isinstance(level, bool):
        raise OpError("invalid", "'level' must be a name or 0-4")
    ctx.log.append(level, raw)


def _op_config_get(ctx: CallContext, req: dict[str, Any]) -> Any:
    key = req.get("key", _ALL)
    if key is _ALL:
        return {k: v for k, v in ctx.settings.items() if k not in ctx.sensitive}
    if not isinstance(key, str):  # `_str_arg`'s check, without its frame: the commonest op
        raise OpError("invalid", "'key' must be a string")
    if key in ctx.sensitive:
        raise OpError("denied", f"setting {key!r} is sensitive; read it with secret.get")
    if key not in ctx.settings:
        raise OpError("not_found", f"no setting {key!r}")
    return ctx.settings[key]


def _op_secret_get(ctx: CallContext, req: dict[str, Any]) -> Any:
    key = _str_arg(req, "key")
    if key not in ctx.sensitive or key not in ctx.settings:
        raise OpError("not_found", f"no sensitive setting {key!r}")
    return ctx.settings[key]


def _op_abi_info(ctx: CallContext, req: dict[str, Any]) -> Any:
    from wasmext._version import __version__

    return {"major": ABI_MAJOR, "minor": ctx.abi_minor, "host": "wasmext",
            "version": __version__, "limits": dict(ctx.limits)}


# The built-in handlers that only read the plugin's own context in memory: a host
# call of theirs needs no deadline of its own while it runs (it cannot outlive the
# call it serves, and its time is charged when it returns).
LOCAL_HANDLERS: frozenset[OpHandler] = frozenset({_op_log, _op_config_get, _op_secret_get,
                                                 _op_abi_info})
