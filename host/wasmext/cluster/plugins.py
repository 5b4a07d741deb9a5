"""Whole plugins served by workers, called from a host as if they were local.

    [remote.agent-guard]
    subject = "wasmext.plugin.agent-guard.v0"

`attach_remote(host, link)` asks a worker for each `[remote.ID]` plugin's registration
(`<subject>.describe`), checks it as a guest's registration map is checked
(`Registration.parse`, then `Host.add`'s prompt, tool-guidance and tool checks), and
adds a `RemotePlugin` in its place: every hook kind the host calls, and every tool it
registers (`{id}__{name}`, through `on_tool`), goes to `Plugin.call`, which the proxy
answers over NATS (`<subject>.call`). So ordering, chaining, traces, metrics and the
failure policy (`failure = "open" | "closed" | "reload"`) are the host's, unchanged, and
the proxy's quarantine is a local plugin's: faults in a row (a worker's fault answer,
an answer that is not the contract, or no worker answering) refuse calls at once for
the cooldown, doubling each time; a clean answer ends the streak.

Each call carries its call tree: `Wasmext-Deadline` is the earlier of the proxy's
`timeout_ms` and what the calling tree has left (and, per attempt, `attempt_ms`), so
the worker's guest stops there with `Timeout` (inherited, not the plugin's fault, when
the deadline was the caller's); `Wasmext-Calls-Left` carries its host calls left. An
attempt nobody answers (no responders, a worker killed mid-call) is retried on another
worker while `retry` and time allow, with the same `Wasmext-Call-Id`, so its state
commit applies once. A caller that gives up (its `CallScope` cancelled: an MCP client's
`notifications/cancelled`, say) publishes the call id on `<subject>.cancel`, and the
worker running it cancels the guest, which ends with `Cancelled`.

A middleware hook (`turn`, `step`, `tool_call`) wraps the caller's inner layers, which
the guest runs with the `next` host call: the caller names a callback inbox
(`Wasmext-Callback`), the worker sends the guest's `next` there, and the calling thread
(the one whose middleware frames they are) runs the inner layers and answers, while it
waits for the hook's own answer. The time inside `next` is the inner layers', not the
call's (its wait for the answer moves on by as much, as the guest's deadline does). An
attempt that ran `next` is not retried when its answer is lost: the inner layers (a
tool, a model call) would run twice; it fails with `RemoteUnavailable` instead.

A host op the worker denies the plugin (a grant missing there) is noted here as a local
denial is, naming the worker (`cluster.notices`: bounded, cleaned, the plugin named
always this proxy's), so `wasmext run` shows it.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from wasmext.cluster import notices
from wasmext.cluster.contract import (
    CALL_ID_HEADER,
    CALLBACK_HEADER,
    CALLS_LEFT_HEADER,
    CONTENT_TYPE,
    DEADLINE_HEADER,
    MAX_BYTES,
    MSGPACK,
    NOTICES_HEADER,
    NOTICES_VERSION,
    ContractError,
    DenialNotice,
    NextRequest,
    PluginAdvert,
    PluginAnswer,
    PluginCall,
    decode,
    encode,
)
from wasmext.cluster.link import down_note
from wasmext.cluster.registry import RemotePluginEntry
from wasmext.cluster.signed import check_reply
from wasmext.errors import (
    BlockingWaitDenied,
    Cancelled,
    ConfigError,
    DecodeError,
    EncodeError,
    GuestTrap,
    HostCallLimitExceeded,
    InstancePoolFull,
    InvalidOutput,
    LoadError,
    MemoryLimitExceeded,
    OutOfFuel,
    PluginError,
    PluginFault,
    Quarantined,
    RemoteRegistrationRefused,
    RemoteUnavailable,
    SignatureInvalid,
    StackOverflow,
    StateUnavailable,
    Timeout,
    WasmextError,
)
from wasmext.hooks.middleware import KINDS as MIDDLEWARE_KINDS
from wasmext.ids import random_hex
from wasmext.observe import tracing
from wasmext.sandbox import callscope, calltree
from wasmext.sandbox.codec import check_depth, may_nest_deeper
from wasmext.sandbox.hostcalls import DENIALS_PER_CALL, CallContext, HostServices, OpError
from wasmext.sandbox.instance import CallResult, PluginInstance
from wasmext.sandbox.limits import Limits
from wasmext.sandbox.module import ModuleInfo
from wasmext.sandbox.plugin import Plugin, QuarantinePolicy, Registration
from wasmext.sandbox.pluginlog import PluginLog
from wasmext.text import clean

if TYPE_CHECKING:
    from nats.aio.msg import Msg

    from wasmext.cluster.link import NatsLink
    from wasmext.host import Host

__all__ = ["MAX_ADVERT_BYTES", "MAX_ADVERT_HOOKS", "RemotePlugin", "attach_remote", "describe"]

log = logging.getLogger("wasmext.cluster.plugins")

MAX_ADVERT_BYTES = 256 * 1024  # a registration map bigger than this is no registration
MAX_ADVERT_HOOKS = 256
# How long past an attempt's deadline the answer may take to arrive: the worker stops
# the guest at the deadline, then answers (Timeout) over the network.
ANSWER_GRACE_S = 0.5
SERVICE_ERROR_CODE = "Nats-Service-Error-Code"
SERVICE_ERROR = "Nats-Service-Error"
WORKER_HEADER = "Wasmext-Worker"
_FAULTS: dict[str, type[PluginFault]] = {c.reason: c for c in (
    OutOfFuel, MemoryLimitExceeded, Timeout, Cancelled, StackOverflow, InvalidOutput,
    HostCallLimitExceeded, BlockingWaitDenied, GuestTrap, RemoteUnavailable)}


class _NoAnswer(Exception):
    """One attempt got no usable answer; another worker may give one (unless `final`:
    the attempt already ran the caller's inner layers). `timed_out`: the attempt's
    time ran out, and `note` is what its reason adds to that (the connection's state)."""

    def __init__(self, reason: str, final: bool = False, *, timed_out: bool = False,
                 note: str = "") -> None:
        super().__init__(reason)
        self.final, self.timed_out, self.note = final, timed_out, note


def describe(link: NatsLink, entry: RemotePluginEntry,
             trusted_workers: tuple[str, ...] = ()) -> PluginAdvert:
    """What a worker advertises for `entry`'s plugin (RemoteUnavailable: no worker
    answered; RemoteRegistrationRefused: the answer is not an advert of that plugin)."""
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    subject = f"{entry.subject}.describe"
    key = random_hex()
    reason = "no attempt"
    for _ in range(entry.retry + 1):
        try:
            msg = link.request(subject, b"", {CALL_ID_HEADER: key, CONTENT_TYPE: MSGPACK},
                               entry.attempt_ms / 1000)
        except (NatsTimeout, TimeoutError):
            reason = f"no answer within {entry.attempt_ms} ms"
            continue
        except NoRespondersError:
            reason = f"no worker serves {entry.subject}"
            continue
        except OSError as exc:
            reason = f"network error: {clean(type(exc).__name__)}"
            continue
        hdrs = msg.headers or {}
        if SERVICE_ERROR_CODE in hdrs:
            reason = f"error {clean(hdrs[SERVICE_ERROR_CODE], 32)}: " \
                     f"{clean(hdrs.get(SERVICE_ERROR, ''), 200)}"
            continue
        if trusted_workers:
            try:
                check_reply(subject, key, hdrs, msg.data, trusted_workers)
            except SignatureInvalid as err:
                reason = err.message
                continue
        return _advert(entry, msg.data)
    raise RemoteUnavailable(f"remote plugin {entry.id}: {reason}", plugin_id=entry.id,
                            hook="register")


def _advert(entry: RemotePluginEntry, data: bytes) -> PluginAdvert:
    def refused(why: str) -> RemoteRegistrationRefused:
        return RemoteRegistrationRefused(f"remote plugin {entry.id}: registration refused: "
                                         f"{why}", plugin_id=entry.id)

    if len(data) > MAX_ADVERT_BYTES:
        raise refused(f"{len(data)} bytes, over {MAX_ADVERT_BYTES}")
    try:
        advert = decode(data, PluginAdvert, MSGPACK, peer=f"worker of {entry.id}")
    except ContractError as err:
        raise refused(err.message) from None
    if advert.plugin_id != entry.id:
        raise refused(f"it is the registration of {clean(advert.plugin_id, 64)!r}")
    hooks = advert.registration.get("hooks")
    if isinstance(hooks, list) and len(hooks) > MAX_ADVERT_HOOKS:
        raise refused(f"{len(hooks)} hooks, over {MAX_ADVERT_HOOKS}")
    return advert


class RemotePlugin(Plugin):
    """A plugin whose calls a worker runs: its registration is the worker's advert
    (checked as a guest's), its `call` a NATS request, its quarantine a local plugin's."""

    def __init__(self, entry: RemotePluginEntry, link: NatsLink, advert: PluginAdvert, *,
                 trusted_workers: tuple[str, ...] = (),
                 services: HostServices | None = None) -> None:
        """`services`: the host's ops, for the `next` of middleware guests (`attach_remote`
        passes the host's)."""
        # No module and no instance here: only what the host and the quarantine read.
        self.id = entry.id
        self.entry, self.link = entry, link
        self.trusted_workers = tuple(trusted_workers)
        self.advert = advert
        raw = encode(advert, MSGPACK)
        self.module = SimpleNamespace(info=ModuleInfo(  # type: ignore[assignment]
            hashlib.sha256(raw).hexdigest(), len(raw), (), (), False, False, False))
        # The longest a call can hold its caller: the deadline, plus per attempt the
        # grace for a late answer (an AsyncSession judges running inline by it).
        self.limits = Limits().replace(timeout_ms=entry.timeout_ms + (entry.retry + 1) * int(
            (ANSWER_GRACE_S + 1.0) * 1000))
        self.requested_limits = {}
        self.settings, self.sensitive, self.grants = {}, frozenset(), frozenset()
        self.services = services if services is not None else HostServices()
        self.quarantine = QuarantinePolicy(entry.quarantine_faults,
                                           entry.quarantine_cooldown_ms / 1000)
        self.max_idle, self.default_priority, self.meter = 0, 50, False
        self.call_limits = {}  # the worker's limits bound its calls: nothing set here applies
        self._limits_dict = self.limits.as_dict()
        self.log = PluginLog(entry.id, self.limits.max_log_lines,
                             self.limits.max_log_line_bytes, [])
        self.calls = self.faults = self._streak = 0
        self.last_fault = None
        self._cooldown = self.quarantine.cooldown_s
        self._quarantined_until = 0.0
        self._idle = []
        self._instances = weakref.WeakSet()
        self._lock = threading.Lock()
        self._promised = self._parsed_raw = None
        try:
            self.registration = Registration.parse(dict(advert.registration), entry.id)
        except (InvalidOutput, LoadError) as err:  # InvalidOutput, UnknownHook
            raise RemoteRegistrationRefused(f"remote plugin {entry.id}: registration refused: "
                                            f"{err.message}", plugin_id=entry.id) from None
        self.by_worker: dict[str, int] = {}  # answers per worker name (bounded)
        self.answered = 0  # calls that succeeded
        self.retries = 0  # attempts after a first one went unanswered
        self.version = clean(advert.version, 64)

    def new_instance(self) -> PluginInstance:
        """A remote plugin has no local instance."""
        raise RuntimeError(f"plugin {self.id} runs on workers: no local instance")

    def with_limits(self, limits: Limits) -> Plugin:
        """The limits that matter are the worker's: the same proxy."""
        return self

    def close(self) -> None:
        """Nothing to drop: the workers hold the instances."""

    def describe(self) -> dict[str, Any]:
        """The proxy's registration, subject and deadlines, for operators."""
        reg = self.registration
        return {"id": self.id, "name": reg.name, "version": self.version,
                "remote": {"subject": self.entry.subject, "timeout_ms": self.entry.timeout_ms,
                           "attempt_ms": self.entry.attempt_ms, "retry": self.entry.retry},
                "hooks": [{"hook": h.hook, "priority": h.priority, "pattern": h.pattern}
                          for h in reg.hooks],
                "extra": dict(reg.extra), "digest": f"sha256:{self.module.info.digest}"}

    # -- calls ---------------------------------------------------------------------

    def call(self, hook: str, data: Any = None, meta: dict[str, Any] | None = None) -> CallResult:
        """Run `hook` on a worker. Raises what a local call raises: PluginFault subclasses
        (RemoteUnavailable when no worker answered), PluginError, Quarantined."""
        if self._quarantined_until and self.quarantined:
            raise self._refuse_quarantined(hook)
        self.calls += 1
        try:
            result = self._traced(hook, data, meta or {})
        except PluginFault as fault:
            if not getattr(fault, "inherited", False):  # the caller's time or cancel
                self._record_fault(fault)
            raise
        self._record_success()
        self.answered += 1
        return result

    def _traced(self, hook: str, data: Any, meta: Mapping[str, Any]) -> CallResult:
        """`_remote` in a client span when tracing is on: the worker's span joins it
        (W3C `traceparent` in the request's headers)."""
        traced = tracing.ACTIVE
        if traced is None:
            return self._remote(hook, data, meta)
        with traced.span("wasmext.remote plugin", {
                "wasmext.plugin_id": tracing.text(self.id), "wasmext.hook": tracing.text(hook),
                "messaging.system": "nats",
                "messaging.destination.name": tracing.text(self.entry.subject)},
                kind="client") as span:
            result = self._remote(hook, data, meta)
            span.set_attribute("wasmext.outcome", "ok")
            return result

    def _remote(self, hook: str, data: Any, meta: Mapping[str, Any]) -> CallResult:
        now = time.monotonic()
        deadline, theirs = now + self.entry.timeout_ms / 1000, False
        frame = calltree.current()
        if frame is not None and frame.deadline < deadline:
            deadline, theirs = frame.deadline, True
        session = meta.get("session")
        try:
            payload = encode(PluginCall(hook, data, session if isinstance(session, str)
                                        else None, meta.get("context")), MSGPACK)
        except (TypeError, ValueError, OverflowError) as exc:
            raise EncodeError(f"plugin {self.id} hook {hook}: {clean(exc, 200)}",
                              plugin_id=self.id, hook=hook) from None
        key = random_hex()
        headers = {CALL_ID_HEADER: key, CONTENT_TYPE: MSGPACK, NOTICES_HEADER: NOTICES_VERSION}
        if tracing.ACTIVE is not None:  # the current span: this call's (`_traced`)
            tracing.ACTIVE.inject(headers)
        if frame is not None:
            headers[CALLS_LEFT_HEADER] = str(max(0, frame.calls_left))
        reason, last = "no attempt", None
        for attempt in range(self.entry.retry + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if attempt:
                self.retries += 1
                if tracing.ACTIVE is not None:  # the trace shows the call was tried again
                    tracing.ACTIVE.annotate("wasmext.attempts", attempt + 1)
            attempt_s = min(left, self.entry.attempt_ms / 1000)
            # Wall-clock: the worker is another process, perhaps another machine.
            headers[DEADLINE_HEADER] = str(int((time.time() + attempt_s) * 1000))
            try:
                msg = self._request(hook, payload, headers, attempt_s, key)
            except _NoAnswer as why:
                reason, last = str(why), why
                if why.final:
                    break
                continue
            return self._result(hook, msg, key, theirs and attempt_s >= left,
                                session if isinstance(session, str) else None)
        if time.monotonic() >= deadline and not reason.startswith("no answer after next"):
            # The last attempt's timeout says no more than this line does, but for the
            # connection's state: that alone is kept, not the same words twice.
            said = last.note if last is not None and last.timed_out else f" ({reason})"
            fault: PluginFault = Timeout(
                f"plugin {self.id} hook {hook}: no answer from a worker within "
                f"{round((deadline - now) * 1000)} ms{said}", plugin_id=self.id, hook=hook)
            fault.inherited = theirs  # type: ignore[attr-defined]
            raise fault
        raise RemoteUnavailable(f"plugin {self.id} hook {hook}: {reason}", plugin_id=self.id,
                                hook=hook)

    def _request(self, hook: str, payload: bytes, headers: dict[str, str], attempt_s: float,
                 key: str) -> Msg:
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout

        wait_s = attempt_s + ANSWER_GRACE_S
        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        inbox = None
        headers = dict(headers)
        try:
            if hook in MIDDLEWARE_KINDS:  # its guest runs our inner layers with `next`
                inbox = self.link.submit(self._callback_inbox(events)).result(5.0)
                headers[CALLBACK_HEADER] = inbox[0]
            future = self.link.submit(self.link.client.request(
                f"{self.entry.subject}.call", payload, timeout=wait_s, headers=headers))
        except (RuntimeError, concurrent.futures.TimeoutError) as exc:  # a closed link
            raise _NoAnswer(f"network error: {clean(exc, 200)}") from None
        future.add_done_callback(lambda f: events.put(("answer", f)))
        scope = callscope.current()

        def give_up() -> None:
            future.cancel()
            self._send_cancel(key)
        remove = scope.on_cancel(give_up) if scope is not None else None
        ran_next = False
        end = time.monotonic() + wait_s + 1.0
        try:
            while True:
                try:
                    kind, item = events.get(timeout=max(0.0, end - time.monotonic()))
                except queue.Empty:
                    future.cancel()
                    raise NatsTimeout from None
                if kind == "answer":
                    return item.result()  # type: ignore[no-any-return]
                started = time.monotonic()
                self._run_next(item, key)
                ran_next = True
                end += time.monotonic() - started  # the inner layers' time, not the call's
        except concurrent.futures.CancelledError:
            raise Cancelled(f"plugin {self.id} hook {hook}: the caller cancelled the call",
                            plugin_id=self.id, hook=hook) from None
        except (NatsTimeout, TimeoutError, concurrent.futures.TimeoutError):
            self._send_cancel(key)  # past its deadline the worker stops it anyway
            if ran_next:
                raise _NoAnswer("no answer after next ran the inner layers", True) from None
            down = down_note(self.link)
            raise _NoAnswer(f"no answer within {round(attempt_s * 1000)} ms{down}",
                            timed_out=True, note=down) from None
        except NoRespondersError:
            time.sleep(min(0.05, attempt_s))  # a worker starting or reconnecting
            raise _NoAnswer(f"no worker serves {self.entry.subject}") from None
        except Exception as exc:  # the connection closed, is reconnecting, refused
            raise _NoAnswer(f"network error: {clean(type(exc).__name__)}", ran_next) from None
        finally:
            if remove is not None:
                remove()
            if inbox is not None:
                self.link.submit(inbox[1].unsubscribe())

    async def _callback_inbox(self, events: queue.Queue[tuple[str, Any]]) -> tuple[str, Any]:
        """A fresh inbox whose requests (a guest's `next`) go to `events`."""
        async def took(msg: Msg) -> None:
            events.put(("next", msg))
        # nats-py's inbox is its NUID: the next one is a few hundred guesses from the
        # last, and a worker sees the inbox of each call it serves. A `next` sent to
        # another call's inbox would run that caller's inner layers.
        inbox = f"{self.link.client.new_inbox()}.{os.urandom(8).hex()}"
        return inbox, await self.link.client.subscribe(inbox, cb=took)

    def _run_next(self, msg: Msg, key: str) -> None:
        """Run the inner layers for a guest's `next`, here, and answer the worker (only
        one signed by a trusted worker, when the caller trusts only those)."""
        handler = self.services.handler("next")
        try:
            if len(msg.data) > MAX_BYTES or handler is None or not msg.reply:
                raise OpError("invalid", "not a next request")
            if self.trusted_workers:
                try:
                    check_reply(msg.subject, key, msg.headers or {}, msg.data,
                                self.trusted_workers)
                except SignatureInvalid as err:
                    raise OpError("denied", err.message) from None
            request = decode(msg.data, NextRequest, MSGPACK, peer="worker").request
            ctx = CallContext(self.id, frozenset(), {}, frozenset(), self.log)
            answer = PluginAnswer(True, handler(ctx, {"op": "next", **request}))
        except ContractError as err:
            answer = PluginAnswer(False, kind="error", code="invalid", message=err.message)
        except OpError as err:
            answer = PluginAnswer(False, kind="error", code=err.code, message=err.message)
        except Exception:  # a host bug: the guest's next fails, named, and we go on
            log.exception("next of %s failed inside the host", self.id)
            answer = PluginAnswer(False, kind="error", code="internal",
                                  message="next failed inside the host")
        if msg.reply:
            try:
                body = encode(answer, MSGPACK)
            except (TypeError, ValueError, OverflowError):
                body = encode(PluginAnswer(False, kind="error", code="failed",
                                           message="the inner layers' result cannot be sent"),
                              MSGPACK)
            self.link.submit(self.link.client.publish(msg.reply, body))

    def _send_cancel(self, key: str) -> None:
        try:
            self.link.submit(self.link.client.publish(f"{self.entry.subject}.cancel",
                                                      key.encode()))
        except Exception:  # best effort: the worker's deadline stops the call anyway
            log.debug("cancel of a call of %s not sent", self.id, exc_info=True)

    def _result(self, hook: str, msg: Msg, key: str, theirs: bool,
                session: str | None = None) -> CallResult:
        """The outcome of one answered attempt; raises what a local call would. Its
        denials are noted first, whatever the outcome (`session`: the call's)."""
        hdrs = msg.headers or {}
        if self.trusted_workers:
            try:
                check_reply(f"{self.entry.subject}.call", key, hdrs, msg.data,
                            self.trusted_workers)
            except SignatureInvalid as err:
                raise RemoteUnavailable(f"plugin {self.id} hook {hook}: {err.message}",
                                        plugin_id=self.id, hook=hook) from None
        worker = clean(hdrs.get(WORKER_HEADER, "?"), 64)
        if worker in self.by_worker or len(self.by_worker) < 256:
            self.by_worker[worker] = self.by_worker.get(worker, 0) + 1
        if SERVICE_ERROR_CODE in hdrs:
            raise RemoteUnavailable(
                f"plugin {self.id} hook {hook}: worker {worker} answered error "
                f"{clean(hdrs[SERVICE_ERROR_CODE], 32)}: {clean(hdrs.get(SERVICE_ERROR, ''), 200)}",
                plugin_id=self.id, hook=hook)
        try:
            answer = decode(msg.data, PluginAnswer, MSGPACK, peer=f"worker {worker}")
        except ContractError as err:
            raise InvalidOutput(f"plugin {self.id} hook {hook}: {err.message}",
                                plugin_id=self.id, hook=hook) from None
        if answer.denials:
            self._note_denials(answer.denials, session, worker)
        if answer.ok:
            # A local guest's answer nests at most max_msgpack_depth: a worker's is held to
            # it too (a value 900 deep broke the MCP reply's serialisation, for one).
            if may_nest_deeper(msg.data, self.limits.max_msgpack_depth):
                try:
                    check_depth(answer.value, self.limits.max_msgpack_depth)
                except DecodeError as err:
                    raise InvalidOutput(f"plugin {self.id} hook {hook}: worker {worker} "
                                        f"answered a value refused: {clean(err.message, 120)}",
                                        plugin_id=self.id, hook=hook) from None
            # The worker's word for it: bounded, so metrics cannot be thrown off.
            return CallResult(answer.value, answer.changed, answer.stop,
                              fuel=min(max(0, answer.fuel), 1 << 53))
        message = clean(answer.message, 300)
        if answer.kind == "error" and answer.reason == InstancePoolFull.reason:
            # The worker had no free instance slot: its capacity, as in-process.
            raise InstancePoolFull(f"on worker {worker}: {message}", plugin_id=self.id,
                                   hook=hook)
        if answer.kind == "error":
            raise PluginError(message, code=clean(answer.code, 64) or "failed",
                              plugin_id=self.id, hook=hook,
                              suggestion=None if answer.suggestion is None
                              else clean(answer.suggestion, 300),
                              help_url=None if answer.help_url is None
                              else clean(answer.help_url, 300))
        if answer.kind == "quarantined":
            raise Quarantined(f"on worker {worker}: {message}", plugin_id=self.id, hook=hook)
        if answer.kind == "state":
            raise StateUnavailable(f"on worker {worker}: {message}", plugin_id=self.id,
                                   hook=hook)
        fault = _FAULTS.get(answer.reason, GuestTrap)(f"on worker {worker}: {message}",
                                                      plugin_id=self.id, hook=hook)
        if isinstance(fault, Timeout) and not isinstance(fault, Cancelled):
            # The caller's deadline, not the plugin's own: not its fault (as in-process).
            fault.inherited = theirs
        raise fault

    def _note_denials(self, denials: list[DenialNotice], session: str | None,
                      worker: str) -> None:
        """The worker's denials of one call, noted as the host notes its own (bounded,
        cleaned, named for this plugin whatever the worker says)."""
        notices.note(self.services, self.id, session, worker,
                     ((d.op, d.message, d.capability) for d in denials[:DENIALS_PER_CALL]))


def attach_remote(host: Host, link: NatsLink,
                  entries: Mapping[str, RemotePluginEntry] | None = None, *,
                  trusted_workers: tuple[str, ...] = ()) -> list[RemotePlugin]:
    """Add a proxy for each remote plugin (`[remote.ID]` by default) whose worker
    advertises an acceptable registration; each one refused, or not reachable, joins
    `host.load_errors` (named) and is not added."""
    added = []
    for entry in (host.config.remote if entries is None else entries).values():
        try:
            proxy = RemotePlugin(entry, link, describe(link, entry, trusted_workers),
                                 trusted_workers=trusted_workers,
                                 services=host.runtime.services)
            try:
                host.add(proxy, source_kind="remote", failure=entry.failure)
            except LoadError as err:  # the prompt and tool-guidance checks of Host.add
                raise RemoteRegistrationRefused(err.message, plugin_id=entry.id) from None
            added.append(proxy)
        except (RemoteRegistrationRefused, RemoteUnavailable, ConfigError) as err:
            log.error("remote plugin %s not added: %s", entry.id, err.describe())
            host.load_errors.append(err)
        except WasmextError as err:  # NatsUnavailable and the like: named, not fatal
            log.error("remote plugin %s not added: %s", entry.id, err.describe())
            host.load_errors.append(err)
    return added
