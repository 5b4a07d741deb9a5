"""The `state.*` host_call ops over a state store, one transaction per hook call.

The first state op of a call opens a transaction on the calling plugin and
session; it commits when the call succeeds and rolls back when the call
faults or answers an error, so a half-done call leaves no trace. Values are
MessagePack documents, stored as the exact bytes and returned decoded.

    {"op": "state.get",    "key": k, "scope"?: "session" | "plugin"}      -> value
    {"op": "state.set",    "key": k, "value": v, "scope"?, "ttl"?: seconds} -> nil
    {"op": "state.delete", "key": k, "scope"?}                            -> existed
    {"op": "state.keys",   "scope"?, "prefix"?: str}                      -> [keys]
    {"op": "state.clear",  "scope"?}                                      -> count
    {"op": "state.cas",    "key": k, "expected"?: v, "value"?: v, "scope"?, "ttl"?} -> nil

A call made inside `applying(key)`, or under a root frame whose `once` is a
`Once(key, root)` (a NATS worker serving a request), commits at most once per key: the
key is recorded in the same atomic commit, for `APPLIED_TTL_S`, and a later commit under it
applies nothing (docs/cluster.md).

`state.get` of a missing key answers `not_found`; `state.cas` without
`expected` requires the key to be absent and without `value` deletes it.
Quota errors answer `limit`, a failed compare-and-set `conflict`.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from wasmext.errors import PluginError
from wasmext.observe import tracing
from wasmext.sandbox import calltree
from wasmext.sandbox.codec import DecodeError, decode, encode
from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError
from wasmext.state import StateError, StateStore, StateUnavailable
from wasmext.state.deadline import within

if TYPE_CHECKING:
    from wasmext.observe.metrics import Metrics
    from wasmext.state import StateTransaction

__all__ = ["APPLIED_TTL_S", "SLOW_OP_S", "Once", "applying", "install_state"]

log = logging.getLogger("wasmext.state")
_SCOPES = ("session", "plugin")
COMMIT_FLOOR = 0.1  # seconds a commit may wait even when the call's time is up
APPLIED_TTL_S = 600.0  # how long an idempotency key is remembered
# What one state op may take on healthy storage: only its wait beyond this is slowness
# that excuses a timeout.
SLOW_OP_S = 0.02


class Once:
    """The idempotency key of the plugin call made inside `applying` (or under `root`,
    the frame that holds it as its `once`), and what became of its commit (`duplicate`:
    one under the same key had already landed)."""

    __slots__ = ("duplicate", "key", "root")

    def __init__(self, key: str, root: calltree.Frame | None) -> None:
        self.key, self.root = key, root
        self.duplicate = False

    def covers(self, frame: calltree.Frame | None) -> bool:
        """Is `frame` the call itself (not a plugin call it nests)?"""
        return frame is not None and frame.parent is self.root


_once: contextvars.ContextVar[Once | None] = contextvars.ContextVar("wasmext_once",
                                                                    default=None)


class applying:  # noqa: N801 - used as the function it was: `with applying(key) as once`
    """The state commit of the plugin call made in this block (not of the calls it
    nests) applies at most once per `key` within APPLIED_TTL_S."""

    __slots__ = ("_once", "_token")

    def __init__(self, key: str) -> None:
        # A class, not a generator: a worker enters one per request.
        self._once = Once(key, calltree.current())

    def __enter__(self) -> Once:
        self._token = _once.set(self._once)
        return self._once

    def __exit__(self, *exc: object) -> None:
        _once.reset(self._token)


def _covering_once() -> Once | None:
    """The idempotency record that covers the plugin call running here: the one its
    parent frame holds (the root a worker pushes for one request: no context variable to
    set), else the one `applying` holds; None for a call either nests."""
    frame = calltree.current()
    root = frame.parent if frame is not None else None
    if root is not None and root.once is not None:
        return root.once  # type: ignore[no-any-return]
    once = _once.get()
    return once if once is not None and once.covers(frame) else None


def install_state(services: HostServices, store: Callable[[], StateStore],
                  metrics: Metrics | None = None) -> None:
    """Register the state ops; `store()` opens the store on first use."""

    def txn(ctx: CallContext) -> StateTransaction:
        current: StateTransaction | None = ctx.__dict__.get("state_txn")
        if current is not None:
            return current
        opened = store().begin(ctx.plugin_id, ctx.session)
        ctx.__dict__["state_txn"] = opened
        once = _covering_once()

        def done(success: bool) -> None:
            ctx.__dict__.pop("state_txn", None)
            if not success:
                ctx.__dict__.pop("state_cleared", None)  # rolled back: nothing was cleared
                opened.rollback()
                return
            wrote = opened.pending
            if once is not None and wrote and time.monotonic() >= ctx.deadline:
                # A remote caller gave the call up at its deadline and answered Timeout
                # (or tries again): what it was told must stay true, so nothing is written.
                opened.rollback()
                raise StateUnavailable(f"plugin {ctx.plugin_id}: state commit refused: the "
                                       "caller's deadline passed before it (nothing written)",
                                       plugin_id=ctx.plugin_id)
            try:
                # The commit, after the guest returned, gets what is left of the call's
                # time; an in-process caller waits for it, so at least COMMIT_FLOOR (work a
                # call did is not dropped for a few milliseconds), a remote one not a moment
                # past its deadline.
                traced = tracing.ACTIVE if wrote else None  # a commit writing nothing: no span
                until = ctx.deadline if once is not None else \
                    max(ctx.deadline, time.monotonic() + COMMIT_FLOOR)
                with within(until), \
                        contextlib.nullcontext() if traced is None else traced.span(
                            "wasmext.state.commit",
                            {"wasmext.plugin_id": tracing.text(ctx.plugin_id),
                             "wasmext.state.changes": wrote}, kind="client"):
                    if once is not None and wrote:
                        opened.once(once.key, APPLIED_TTL_S)
                    report = opened.commit()
                if report.duplicate and once is not None:
                    once.duplicate = True
                    log.info("plugin %s: state commit under idempotency key %s was applied "
                             "before: not applied again", ctx.plugin_id, once.key,
                             extra={"plugin_id": ctx.plugin_id, "session": ctx.session})
                    return
            except StateUnavailable:
                raise  # the host's storage failed: never the plugin's fault
            except StateError as err:
                # Another writer changed what this call read, or took the room it
                # needed: the call's result rested on writes that did not happen.
                raise PluginError(f"state commit refused after the call: {err.message}",
                                  code=err.code, plugin_id=ctx.plugin_id, hook=ctx.hook) from err
            if metrics is not None and wrote:
                from wasmext.state import Scope

                try:  # a gauge: never worth waiting past the call's time for
                    with within(ctx.deadline or None):
                        size = store().usage(Scope(ctx.plugin_id)).plugin_bytes
                    metrics.set_state_size(ctx.plugin_id, size)
                except StateUnavailable:
                    pass
            for cleared_scope, entries in ctx.__dict__.pop("state_cleared", ()):
                # The seed's "state clear event": one record per committed clear.
                log.info("plugin %s cleared its %s state (%d entries)", ctx.plugin_id,
                         cleared_scope, entries,
                         extra={"plugin_id": ctx.plugin_id, "session": ctx.session,
                                "event": "state.clear", "scope": cleared_scope,
                                "entries": entries})
            for warning in report.warnings:
                log.warning("plugin %s: %s", ctx.plugin_id, warning,
                            extra={"plugin_id": ctx.plugin_id, "session": ctx.session})
            if report.evicted:
                log.info("plugin %s: %d state entries evicted (least recently used)",
                         ctx.plugin_id, len(report.evicted), extra={"plugin_id": ctx.plugin_id})
                if metrics is not None:
                    metrics.record_eviction(ctx.plugin_id, len(report.evicted))
        ctx.pending.append(done)
        return opened

    def waited(ctx: CallContext, started: float) -> None:
        """Storage time is the host's: not charged to the host-call budget. A call whose
        storage was slow (each op's wait beyond SLOW_OP_S, summed) for a quarter of its
        time is excused a timeout. Only the slowness counts: many quick ops are the
        plugin's choice (990 `state.keys` took 0.25 s, then the guest spun to its
        time-out and was never blamed, never quarantined, and storage was)."""
        spent = time.monotonic() - started
        ctx.waited_seconds += spent
        ctx.waited_total += max(0.0, spent - SLOW_OP_S)
        total = ctx.waited_total
        timeout = ctx.limits.get("timeout_ms", 0) / 1000
        if ctx.slow is None and timeout and total * 4 >= timeout:
            ctx.slow = StateUnavailable(f"state storage was slow for {total:.3f} s of the "
                                        f"call's {timeout:.3f} s", plugin_id=ctx.plugin_id,
                                        hook=ctx.hook)

    def scope(req: dict[str, Any]) -> Any:
        value = req.get("scope", "session")
        if value not in _SCOPES:
            raise OpError("invalid", "'scope' must be 'session' or 'plugin'")
        return value

    def key(req: dict[str, Any]) -> str:
        value = req.get("key")
        if not isinstance(value, str):
            raise OpError("invalid", "'key' must be a string")
        return value

    def ttl(req: dict[str, Any]) -> float | None:
        value = req.get("ttl")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise OpError("invalid", "'ttl' must be a number of seconds")
        return value

    def op(name: str, body: Callable[[StateTransaction, dict[str, Any]], Any]) -> None:
        def handler(ctx: CallContext, req: dict[str, Any]) -> Any:
            started = time.monotonic()
            try:
                with within(ctx.deadline or None):
                    result = body(txn(ctx), req)
            except StateUnavailable as err:
                if ctx.deadline and started >= ctx.deadline:
                    # Asked after its own time was up: the plugin's lateness, not a
                    # storage fault that would excuse whatever the call does next.
                    raise OpError("timeout", "the call's deadline passed before this "
                                  "state op") from None
                ctx.host_fault = ctx.host_fault or err
                # The details (the server's address, its error) are the operator's: the
                # host fault carries them; the plugin learns only that storage failed.
                raise OpError(err.code, "state storage is unavailable") from None
            except StateError as err:
                raise OpError(getattr(err, "code", "internal"), err.message) from None
            finally:
                waited(ctx, started)
            if name == "state.clear":  # logged when (if) the call's transaction commits
                ctx.__dict__.setdefault("state_cleared", []).append(
                    (req.get("scope", "session"), result))
            if metrics is not None:
                metrics.record_state_op(ctx.plugin_id, name.split(".", 1)[1])
            return result
        services.register(name, handler)

    def get(t: StateTransaction, req: dict[str, Any]) -> Any:
        raw = t.get(key(req), scope=scope(req))
        if raw is None:
            raise OpError("not_found", f"no state key {req['key']!r}")
        try:
            return decode(raw)
        except DecodeError as exc:  # only a foreign import could have stored it
            raise OpError("internal", f"stored value is unreadable: {exc}") from exc

    def cas(t: StateTransaction, req: dict[str, Any]) -> None:
        expected = encode(req["expected"]) if "expected" in req else None
        new = encode(req["value"]) if "value" in req else None
        t.cas(key(req), expected, new, scope=scope(req), ttl=ttl(req))

    def keys(t: StateTransaction, req: dict[str, Any]) -> list[str]:
        prefix = req.get("prefix", "")
        if not isinstance(prefix, str):
            raise OpError("invalid", "'prefix' must be a string")
        return t.keys(scope=scope(req), prefix=prefix)

    op("state.get", get)
    op("state.set", lambda t, r: t.set(key(r), encode(r.get("value")), scope=scope(r),
                                       ttl=ttl(r)))
    op("state.delete", lambda t, r: t.delete(key(r), scope=scope(r)))
    op("state.keys", keys)
    op("state.clear", lambda t, r: t.clear(scope=scope(r)))
    op("state.cas", cas)
