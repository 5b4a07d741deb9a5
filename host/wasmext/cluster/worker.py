"""`wasmext worker`: a host's plugins served as NATS services (the serving loop).

Every loaded plugin becomes a NATS micro service (`<prefix>-<plugin id>`, the plugin's
version) with an endpoint per stage and per whole-plugin kind (`cluster.endpoints`), in
the queue group `wasmext`: N workers share the load and answer `$SRV.PING|INFO|STATS`.
A stage request runs as `cluster.stagecall` says (its budget from the headers, one
`Host.try_call` under the plugin's sandbox, limits, grants and state transaction,
exactly as in-process). A call whose worst case (the plugin's `timeout_ms` plus the
deadline slack) is below `inline_below_ms` (default 50 ms, as for awaited hooks) and
whose plugin runs no application code runs on the worker's event loop, in the
subscription's handler, with no thread hop ("by rule"). Any other plugin without
application code starts on the lane (`cluster.lane`: a thread of its own, and
wasmext's call pool behind a slow call, `concurrency` threads at most) and earns the
loop (`cluster.looptrial`): once `PROVE_CALLS` of its stage calls in a row ran within
`short_call_ms` (default 20 ms) there, its calls run on the loop ("on trial"), each
one timed. The first that runs longer moves the plugin back to the lane (`demoted`,
logged, counted per endpoint) for `DEMOTE_S` (a minute), twice as long at each
demotion after that;
then it proves itself again. A plugin can hold the loop past `short_call_ms` once per
back-off, for at most its own `timeout_ms` (capped by the caller's deadline): once in
its first minute, once in the next two, once in the four after, and so on. A new
version served after a rescan proves itself again (a demoted one finishes its
back-off first). Plugins are many, so the trial pauses for the worker as well: once
`Worker.max_demoted` (4) demotions came within `DEMOTE_S` of each other, no plugin is
on trial for the next `DEMOTE_S`; a crowd of hostile plugins holds the loop that many
times in a row at most, not once each.
`short_call_ms=0` turns the trial off (the lane for every plugin not inline by rule);
`inline_below_ms=0` keeps every call off the loop.

A request whose `Wasmext-Deadline` has passed (the caller gave the attempt up: the
worker was frozen, or its queue was long) is dropped unrun and unanswered, when it
arrives and again when a pool thread takes it. Per endpoint, `$SRV.STATS` data and
`extension_worker_requests_total` count answered, failed, expired and duplicate
requests.

A whole plugin is served on `<prefix>.plugin.<id>.v<major>`: `.describe` answers its
registration, `.call` runs any hook of it (`cluster.served`; a host calls these through
a proxy plugin, `cluster.plugins`), and a publish on `.cancel` naming a call id stops
that call's guest (every worker hears it; the one running the call cancels its
`CallScope`).

`drain()` (on SIGTERM) stops taking requests, finishes those already taken, then
closes the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext.aio import APP_GRANTS, DEADLINE_SLACK_MS, INLINE_BELOW_MS
from wasmext.callpool import CallPool
from wasmext.cluster import notices, served
from wasmext.cluster.contract import (
    CALL_ID_HEADER,
    CALLBACK_HEADER,
    CONTENT_TYPE,
    DENIALS_HEADER,
    JSON,
    MSGPACK,
    NOTICES_HEADER,
    NOTICES_VERSION,
    ContractError,
    encoding_of,
)
from wasmext.cluster.endpoints import PLUGIN_KINDS, Counts, Stage, stages_of, version_of
from wasmext.cluster.lane import Answer, Lane
from wasmext.cluster.link import connect, header_block
from wasmext.cluster.looptrial import PROVE_CALLS, SHORT_CALL_MS, LoopTrial
from wasmext.cluster.metrics import WorkerMetrics
from wasmext.cluster.natsauth import NatsAuth
from wasmext.cluster.registry import check_prefix
from wasmext.cluster.signed import ERROR_CODE_HEADER, ERROR_HEADER, ReplySigner
from wasmext.cluster.stagecall import Budget, call_stage, session_id
from wasmext.errors import InstancePoolFull, StateUnavailable
from wasmext.observe import tracing
from wasmext.sandbox.callscope import CallScope
from wasmext.sandbox.hostcalls import OpError
from wasmext.text import clean

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription
    from nats.micro.request import Request
    from nats.micro.service import EndpointStats, Service

    from wasmext.host import Host

__all__ = ["PROVE_CALLS", "QUEUE_GROUP", "SHORT_CALL_MS", "WORKER_HEADER", "Counts", "Stage",
           "Worker", "session_id", "stages_of"]

log = logging.getLogger("wasmext.cluster.worker")
QUEUE_GROUP = "wasmext"
WORKER_HEADER = "Wasmext-Worker"  # which worker answered: for load spread and debugging
# How long a guest's `next` may wait for the caller's inner layers (a turn's model call
# and tools among them); a cancel ends the wait at once.
NEXT_TIMEOUT_S = 300.0
# Stage calls taken and not yet answered (queued for the lane or running), and their
# request bytes. Requests reach the lane as soon as they are read (direct delivery, or
# a callback that returns at once), so nats-py's slow-consumer limits never see them:
# these bound a peer's flood instead; past them a request is dropped unrun, as a slow
# consumer's message is.
MAX_BACKLOG = 4096
MAX_BACKLOG_BYTES = 64 * 1024 * 1024
# Where a plugin's stage calls run (Worker._place)
LANE, BY_RULE, ON_TRIAL = 0, 1, 2
# A stage call's (answer body, duplicate, error, seconds it ran): body None, expired unrun
Outcome = tuple["bytes | None", bool, "tuple[str, str] | None", float]


class Worker:
    """Serves a host's plugins as NATS micro services, one per plugin."""

    def __init__(self, host: Host, url: str, *, prefix: str = "wasmext",
                 concurrency: int = 8, name: str = "wasmext-worker",
                 auth: NatsAuth | None = None,
                 inline_below_ms: float = INLINE_BELOW_MS,
                 short_call_ms: float = SHORT_CALL_MS) -> None:
        self.host, self.url, self.prefix = host, url, check_prefix(prefix)
        self.auth = auth
        # With [nats] reply_key, every answer is signed (cluster.signed).
        self.signer = ReplySigner(Path(auth.reply_key)) if auth and auth.reply_key else None
        self.name = name
        self.concurrency = concurrency
        self.stages = stages_of(host, prefix)
        self.served = 0  # requests answered (ok or error), for tests and logs
        self.shed = 0  # stage requests dropped unrun: the backlog was full
        self.max_backlog, self.max_backlog_bytes = MAX_BACKLOG, MAX_BACKLOG_BYTES
        self._backlog_bytes = 0  # request bytes of the calls on the lane and plugin calls
        self._plugin_calls = 0  # whole plugin calls (`call` endpoints) taken, not answered
        self._shed_logged = 0.0  # when the last "backlog full" line was logged
        self.inline_below_ms = inline_below_ms
        self.trial = LoopTrial(name, short_call_ms)
        self._pool = CallPool(concurrency, name="wasmext-worker")
        self._lane = Lane(self._pool, concurrency, self._delivered)
        # The answer's headers by encoding, built once (copied when an error or a
        # signature is added). JSON, the contract's default, goes unnamed: every header
        # costs both sides an encode and a parse.
        self._answer_headers = {JSON: {WORKER_HEADER: name},
                                MSGPACK: {CONTENT_TYPE: MSGPACK, WORKER_HEADER: name}}
        self._answer_blocks = {k: header_block(v) for k, v in self._answer_headers.items()}
        self._answer_soon: Callable[[str, bytes, bytes], bool] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._services: dict[str, Service] = {}  # by plugin id
        self._shapes: dict[str, tuple[str, tuple[str, ...]]] = {}  # served: version, subjects
        self._nc: Client | None = None
        self._draining = False
        self.counts: dict[str, Counts] = {}  # by subject
        self.cancelled = 0  # plugin calls a caller's cancel reached
        self._scopes: dict[str, CallScope] = {}  # plugin calls running, by call id
        self._cancels: Subscription | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def short_call_ms(self) -> float:
        """How long a call on the loop may run and still count as short."""
        return self.trial.short_call_ms

    @property
    def demoted(self) -> dict[str, float]:
        """Each plugin ever demoted from the loop: ms its last slow call held the loop."""
        return self.trial.demoted

    @property
    def demote_s(self) -> float:
        """A first demotion's back-off in seconds (doubled at each one after)."""
        return self.trial.demote_s

    @demote_s.setter
    def demote_s(self, seconds: float) -> None:
        """Set the first demotion's back-off."""
        self.trial.demote_s = seconds

    @property
    def max_demoted(self) -> int:
        """Demotions within `demote_s` after which the trial pauses for every plugin."""
        return self.trial.max_demoted

    @max_demoted.setter
    def max_demoted(self, count: int) -> None:
        """Set how many demotions within `demote_s` pause the trial."""
        self.trial.max_demoted = count

    async def start(self) -> None:
        """Connect to NATS and start serving every plugin's stages."""
        self._nc = await connect(self.url, self.name, auth=self.auth)
        self._answer_soon = getattr(self._nc, "answer_soon", None)
        self._loop = asyncio.get_running_loop()
        served.install_next(self.host.runtime.services)
        WorkerMetrics.add(self.host.observe.metrics.registry, self.name, self._figures)
        for pid, stages in self.stages.items():
            await self._add(pid, stages)
        # No queue group: every worker hears a cancel; the one running the call acts.
        self._cancels = await self._nc.subscribe(f"{self.prefix}.plugin.*.*.cancel",
                                                 cb=self._on_cancel)
        await self._nc.flush()
        subjects = ", ".join(s.subject for st in self.stages.values() for s in st)
        log.info("worker %s serving %s", self.name,
                 subjects or "nothing yet (no plugin is loaded)")

    async def _add(self, pid: str, stages: list[Stage]) -> None:
        from nats.micro import add_service
        from nats.micro.service import EndpointConfig, ServiceConfig

        assert self._nc is not None
        lp = self.host.plugins[pid]
        svc = await add_service(self._nc, ServiceConfig(
            name=f"{self.prefix.replace('.', '_')}-{pid}", version=version_of(lp),
            description=clean(lp.manifest.description if lp.manifest else pid, 200),
            metadata={"plugin_id": pid, "worker": self.name}, queue_group=QUEUE_GROUP,
            stats_handler=self._endpoint_stats))
        self._services[pid] = svc
        for stage in stages:
            await svc.add_endpoint(EndpointConfig(
                name=stage.kind, subject=stage.subject, handler=self._handler(stage),
                metadata={"type": stage.kind}))
            if stage.kind not in PLUGIN_KINDS:
                self._deliver_now(svc, stage)
        self._shapes[pid] = self._shape(pid, stages)

    def _deliver_now(self, svc: Service, stage: Stage) -> None:
        """Take `stage`'s requests as the client reads them (`FastClient.deliver_now`):
        no queue, task switch, callback coroutine or micro wrapper per request. The
        endpoint's request count is kept as nats-py's wrapper keeps it."""
        deliver_now = getattr(self._nc, "deliver_now", None)
        endpoints = getattr(svc, "_endpoints", None)
        endpoint: Any = endpoints[-1] if endpoints else None
        sub = getattr(endpoint, "_subscription", None)
        if deliver_now is None or sub is None or not hasattr(endpoint, "_num_requests"):
            return  # another nats-py: its own path, the handler above
        def take(msg: Msg) -> None:
            endpoint._num_requests += 1
            try:
                place = self._place(stage)
                if place:  # short: answered here, in arrival order, no hop
                    send = self._serve_now(stage, msg, place == ON_TRIAL)
                    if send is not None:  # an error or a signed answer: it must wait
                        self._later(send)
                else:
                    self._queue(stage, msg)  # the lane answers it
            except Exception as err:  # a host bug: one line, named, as nats-py answers it
                from nats.micro.request import Request

                endpoint._num_errors += 1
                self._later(Request(msg).respond_error("500", clean(
                    f"plugin {stage.plugin_id} {stage.kind}: {err}", 300)))
        deliver_now(sub, take)

    def _later(self, send: Coroutine[Any, Any, None] | None) -> None:
        """Run an answer's send that must wait (an error, a signed answer) as a task."""
        if send is None:
            return
        task = asyncio.get_running_loop().create_task(self._send([send]))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def resync(self) -> tuple[list[str], list[str]]:
        """Serve what the host has loaded now (after a rescan): (plugins now served
        anew, plugins no longer served). A plugin whose stages or version changed is
        both: its old service drains, the new one takes over its subjects."""
        now = stages_of(self.host, self.prefix)
        old = self._shapes
        new = {pid: self._shape(pid, st) for pid, st in now.items()}
        gone = [pid for pid in old if old[pid] != new.get(pid)]
        came = [pid for pid in new if new[pid] != old.get(pid)]
        for pid in gone:
            svc = self._services.pop(pid, None)
            if svc is not None:
                await self._stop_service(svc)
            del self.stages[pid], self._shapes[pid]
        for pid in came:
            self.trial.new_version(pid)
            try:
                await self._add(pid, now[pid])
            except Exception as err:  # one plugin's service failing leaves the others
                log.warning("worker %s: cannot serve %s: %s", self.name, pid,
                            clean(str(err), 200))
                svc = self._services.pop(pid, None)
                if svc is not None:
                    await self._stop_service(svc)
                continue
            self.stages[pid] = now[pid]
        if gone or came:
            log.info("worker %s: serving anew %s, no longer %s", self.name,
                     ", ".join(came) or "-", ", ".join(gone) or "-")
        return came, gone

    def _shape(self, pid: str, stages: list[Stage]) -> tuple[str, tuple[str, ...]]:
        lp = self.host.plugins.get(pid)
        return (version_of(lp) if lp is not None else "", tuple(s.subject for s in stages))

    def _place(self, stage: Stage) -> int:
        """Where `stage`'s next call runs: LANE, on the loop BY_RULE (its worst case is
        below `inline_below_ms`), or on the loop ON_TRIAL (its plugin's calls have been
        short so far: timed, and sent back to the lane when one is not)."""
        lp = self.host.plugins.get(stage.plugin_id)
        if lp is None or self.inline_below_ms <= 0:
            return LANE
        plugin = lp.plugin
        if not APP_GRANTS.isdisjoint(plugin.grants):
            return LANE
        if plugin.limits.timeout_ms + DEADLINE_SLACK_MS < self.inline_below_ms:
            return BY_RULE
        return ON_TRIAL if self.trial.on_trial(stage.plugin_id) else LANE

    def _demote(self, stage: Stage, took_s: float) -> None:
        """`stage`'s call held the loop longer than a short call: its plugin goes back
        to the lane for a back-off (`LoopTrial.demote`), its endpoint counts it."""
        self.trial.demote(stage.plugin_id, stage.kind, took_s)
        self._count(stage).demoted += 1

    async def _on_cancel(self, msg: Msg) -> None:
        scope = self._scopes.get(msg.data[:128].decode("ascii", "replace"))
        if scope is not None and not scope.cancelled.is_set():
            self.cancelled += 1
            scope.cancel()

    def _handler(self, stage: Stage) -> Any:
        async def handle(req: Request) -> None:
            if stage.kind == "describe":  # no plugin code runs: answered here
                await self._describe(stage, req)
                return
            if stage.kind == "call":  # off the loop, so that a cancel is heard meanwhile
                size = len(req.data)
                if not self._admit(stage, size):
                    return
                self._plugin_calls += 1
                task = asyncio.get_running_loop().create_task(self._serve_plugin(stage, req))
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)
                task.add_done_callback(lambda _done: self._plugin_call_over(size))
                return
            place = self._place(stage)
            if place:  # short: answered here, in arrival order, no hop
                await self._serve(stage, req._msg, place == ON_TRIAL)
                return
            self._queue(stage, req._msg)  # the lane answers it: no task until the answer
        return handle

    def _figures(self) -> dict[str, tuple[str, Counts]]:
        """Counts by subject, with the plugin id each subject serves (for metrics)."""
        ids = {s.subject: s.plugin_id for st in self.stages.values() for s in st}
        return {subj: (ids.get(subj, "?"), c) for subj, c in list(self.counts.items())}

    def _endpoint_stats(self, endpoint: EndpointStats) -> dict[str, Any]:
        # nats-py times the handler, which only starts a task here: the real figures
        # (answered, failed, mean time) go in each endpoint's `data`.
        c = self.counts.get(endpoint.subject) or Counts()
        return {"answered": c.answered, "errors": c.failed, "expired": c.expired,
                "duplicate": c.duplicate, "on_loop": c.on_loop, "demoted": c.demoted,
                "average_ms": round(c.total_ns / c.answered / 1e6, 3) if c.answered else 0.0}

    def _count(self, stage: Stage) -> Counts:
        counts = self.counts.get(stage.subject)
        if counts is None:  # pool threads count too: setdefault keeps the first made
            counts = self.counts.setdefault(stage.subject, Counts())
        return counts

    def _expired(self, stage: Stage, budget: Budget) -> None:
        self._count(stage).expired += 1
        log.info("worker %s: dropped a %s request for %s unrun: its deadline passed %.0f ms "
                 "ago", self.name, stage.kind, stage.plugin_id,
                 (time.monotonic() - (budget.deadline or 0.0)) * 1000)

    async def _describe(self, stage: Stage, req: Request) -> None:
        lp = self.host.plugins.get(stage.plugin_id)
        headers = {CONTENT_TYPE: MSGPACK, WORKER_HEADER: self.name}
        if lp is None:
            await req.respond_error("503", f"plugin {stage.plugin_id} is not loaded here",
                                    headers=headers)
            return
        body = served.advert(lp, version_of(lp))
        if self.signer is not None:
            headers = self.signer.sign(req.subject, (req.headers or {}).get(CALL_ID_HEADER, ""),
                                       headers, body)
        await req.respond(body, headers=headers)

    async def _serve_plugin(self, stage: Stage, req: Request) -> None:
        """One hook call of a plugin served whole, on the call pool, cancellable."""
        started = time.perf_counter_ns()
        budget = Budget(req.headers)
        if budget.expired():
            self._expired(stage, budget)
            return
        call_id = (req.headers or {}).get(CALL_ID_HEADER, "")[:128]
        scope = CallScope()
        if call_id:
            self._scopes[call_id] = scope
        headers = {CONTENT_TYPE: MSGPACK, WORKER_HEADER: self.name}
        error: tuple[str, str] | None = None
        body: bytes | None = b""
        # The versions of denial notices the caller reads ("1", or a list: "1,2").
        notices = NOTICES_VERSION in (req.headers or {}).get(NOTICES_HEADER, "").split(",")
        try:
            body = await self._pool.submit(asyncio.get_running_loop(), self._call_plugin,
                                           stage, req.data, budget, scope,
                                           (req.headers or {}).get(CALLBACK_HEADER), call_id,
                                           notices)
        except ContractError as err:
            error = ("400", err.message)
        except Exception as err:  # a host bug: one line, named
            error = ("500", clean(f"plugin {stage.plugin_id}: {err}", 300))
        finally:
            if call_id and self._scopes.get(call_id) is scope:
                del self._scopes[call_id]
        if body is None:
            self._expired(stage, budget)
            return
        if error is not None:
            body = b""
            headers.update({ERROR_CODE_HEADER: error[0], ERROR_HEADER: error[1]})
        if self.signer is not None:
            headers = self.signer.sign(req.subject, call_id, headers, body)
        if error is not None:
            await req.respond_error(error[0], error[1], headers=headers)
        else:
            await req.respond(body, headers=headers)
        self.served += 1
        counts = self._count(stage)
        counts.answered += 1
        counts.failed += error is not None
        counts.total_ns += time.perf_counter_ns() - started

    def _call_plugin(self, stage: Stage, raw: bytes, budget: Budget, scope: CallScope,
                     inbox: str | None = None, call_id: str = "", notices: bool = False
                     ) -> bytes | None:
        if budget.expired():  # it waited in the pool's queue past the caller's deadline
            return None
        callback = self._callback(inbox, call_id, scope)
        traced = tracing.ACTIVE
        if traced is None:
            return served.call(self.host, stage.plugin_id, raw, budget.frame(), budget.key,
                               scope, callback, notices)
        # A child of the caller's span (W3C traceparent in the request's headers).
        with traced.span("wasmext.worker plugin", {
                "wasmext.plugin_id": tracing.text(stage.plugin_id),
                "wasmext.worker": tracing.text(self.name), "messaging.system": "nats",
                "messaging.destination.name": tracing.text(stage.subject)},
                kind="server", parent=traced.extract(budget.headers)):
            return served.call(self.host, stage.plugin_id, raw, budget.frame(), budget.key,
                               scope, callback, notices)

    def _callback(self, inbox: str | None, call_id: str, scope: CallScope
                  ) -> served.Callback | None:
        """Sends a guest's `next` to the caller's `inbox` and waits for its answer (on a
        pool thread: the request goes out on the worker's loop). Signed like an answer
        when the worker signs: a caller that trusts only its workers runs no other's."""
        if not inbox or not served.CALLBACK_RE.fullmatch(inbox) or self._nc is None \
                or self._loop is None:
            return None
        nc, loop = self._nc, self._loop

        def send(body: bytes) -> bytes:
            if scope.cancelled.is_set():
                raise OpError("cancelled", "the caller gave the call up")
            headers = {CONTENT_TYPE: MSGPACK, WORKER_HEADER: self.name}
            if self.signer is not None:
                headers = self.signer.sign(inbox, call_id, headers, body)
            future = asyncio.run_coroutine_threadsafe(
                nc.request(inbox, body, timeout=NEXT_TIMEOUT_S, headers=headers), loop)
            remove = scope.on_cancel(future.cancel)
            try:
                return future.result(NEXT_TIMEOUT_S + 1).data
            except Exception as exc:  # the caller went away, or gave up
                raise OpError("failed", f"the caller did not run next: "
                                        f"{clean(type(exc).__name__, 64)}") from None
            finally:
                remove()
        return send

    def _take(self, stage: Stage, msg: Msg) -> tuple[Budget, str, int] | None:
        """A stage request's budget, encoding and start, or None when its deadline has
        passed (the caller gave this attempt up: nobody waits for it)."""
        started = time.perf_counter_ns()
        hdrs = msg.headers
        budget = Budget(hdrs)
        if budget.late():
            self._expired(stage, budget)
            return None
        return budget, encoding_of(hdrs), started

    def _timed_outcome(self, stage: Stage, raw: bytes, encoding: str, budget: Budget
                       ) -> Outcome:
        """(answer body, duplicate, error, seconds the call ran) of one stage call (body
        None: expired unrun), on the loop or on the lane (the trial reads the time)."""
        began = time.perf_counter()
        try:
            body, duplicate = call_stage(self.host, stage, raw, encoding, budget, self.name)
        except ContractError as err:
            return b"", False, ("400", err.message), time.perf_counter() - began
        except (InstancePoolFull, StateUnavailable) as err:
            # This worker's own limit or storage, not the plugin: 503, which a caller
            # tries again elsewhere (the state commit, if any, was not applied).
            return b"", False, ("503", clean(f"{err.reason} on worker {self.name}: "
                                             f"{err.message}", 300)), time.perf_counter() - began
        except Exception as err:  # the plugin failed: its reason, one line, named
            return b"", False, ("500", clean(f"plugin {stage.plugin_id} {stage.kind}: {err}",
                                             300)), time.perf_counter() - began
        return body, duplicate, None, time.perf_counter() - began

    def _answer(self, stage: Stage, msg: Msg, budget: Budget, encoding: str,
                started: int, body: bytes | None, duplicate: bool,
                error: tuple[str, str] | None, counts: Counts | None = None
                ) -> Coroutine[Any, Any, None] | None:
        """Count a stage call's outcome; the send of its answer (None: it expired unrun,
        or its answer is queued already)."""
        if counts is None:
            counts = self._count(stage)
        if body is None:  # it waited past the caller's deadline: not run, not answered
            self._expired(stage, budget)
            return None
        denials = budget.denials
        if error is None and self.signer is None and denials is None:
            # the usual answer: queued, no coroutine
            reply = msg.reply
            if reply and self._answer_soon is not None \
                    and self._answer_soon(reply, body, self._answer_blocks[encoding]):
                self._answered(counts, started, duplicate, False)
                return None
        headers = self._answer_headers[encoding]
        if error is not None:
            body = b""
            headers = {**headers, ERROR_CODE_HEADER: error[0], ERROR_HEADER: error[1]}
        if denials is not None:  # the caller asked for them (Wasmext-Notices)
            headers = {**headers, DENIALS_HEADER: notices.header_value(denials)}
        if self.signer is not None:
            headers = self.signer.sign(msg.subject, (msg.headers or {}).get(CALL_ID_HEADER, ""),
                                       headers, body)
        self._answered(counts, started, duplicate, error is not None)
        from nats.micro.request import Request  # only for what nats-py must send

        if error is not None:
            return Request(msg).respond_error(error[0], error[1], headers=headers)
        return Request(msg).respond(body, headers=headers)

    def _answered(self, counts: Counts, started: int, duplicate: bool, failed: bool) -> None:
        self.served += 1
        counts.answered += 1
        counts.failed += failed
        counts.duplicate += duplicate
        counts.total_ns += time.perf_counter_ns() - started

    async def _serve(self, stage: Stage, msg: Msg, on_trial: bool = False) -> None:
        """A stage call on the loop (short, no application code: no hop at all)."""
        send = self._serve_now(stage, msg, on_trial)
        if send is not None:
            await send

    def _serve_now(self, stage: Stage, msg: Msg, on_trial: bool = False
                   ) -> Coroutine[Any, Any, None] | None:
        """Run a stage call here; the send of its answer when it could not be queued
        at once (None: queued, or expired unrun). A call `on_trial` that is not short
        sends its plugin to the lane."""
        taken = self._take(stage, msg)
        if taken is None:
            return None
        budget, encoding, started = taken
        body, duplicate, error, took = self._timed_outcome(stage, msg.data, encoding, budget)
        counts = self._count(stage)
        if body is not None:
            counts.on_loop += 1
            if on_trial and took >= self.trial.short_s:
                self._demote(stage, took)
        return self._answer(stage, msg, budget, encoding, started, body, duplicate, error,
                            counts)

    def _queue(self, stage: Stage, msg: Msg) -> None:
        """A stage call for the lane; `_delivered` answers it (on the loop's thread)."""
        taken = self._take(stage, msg)
        if taken is None:
            return
        budget, encoding, started = taken
        if not self._admit(stage, len(msg.data)):
            return
        assert self._loop is not None
        self._lane.submit(self._loop, (stage, msg, budget, encoding, started),
                          self._timed_outcome, stage, msg.data, encoding, budget)

    def _admit(self, stage: Stage, size: int) -> bool:
        """Count a call of `size` request bytes into the backlog; False (dropped, counted,
        logged) when the backlog is full."""
        if self._lane.pending + self._plugin_calls < self.max_backlog and \
                self._backlog_bytes + size <= self.max_backlog_bytes:
            self._backlog_bytes += size
            return True
        self.shed += 1
        now = time.monotonic()
        if now - self._shed_logged >= 1.0:
            self._shed_logged = now
            log.warning("worker %s: dropped a %s request for %s unrun: %d calls (%d bytes) "
                        "already wait (%d dropped so far)", self.name, stage.kind,
                        stage.plugin_id, self._lane.pending + self._plugin_calls,
                        self._backlog_bytes, self.shed)
        return False

    def _plugin_call_over(self, size: int) -> None:
        self._plugin_calls -= 1
        self._backlog_bytes -= size

    def _delivered(self, batch: list[Answer]) -> None:
        """The lane's answers: counted here, sent by one task for the whole batch."""
        sends = []
        for (stage, msg, budget, encoding, started), outcome, raised in batch:
            self._backlog_bytes -= len(msg.data)
            if raised is not None:  # not an Exception (those are outcomes): still one line
                outcome = (b"", False, ("500", clean(f"plugin {stage.plugin_id} {stage.kind}: "
                                                     f"{type(raised).__name__}", 300)), 0.0)
            elif outcome[0] is not None:  # it ran (not dropped unrun: that proves nothing)
                self.trial.proved(stage.plugin_id, outcome[3])
            send = self._answer(stage, msg, budget, encoding, started, *outcome[:3])
            if send is not None:
                sends.append(send)
        if sends:
            task = asyncio.get_running_loop().create_task(self._send(sends))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def _send(self, sends: list[Coroutine[Any, Any, None]]) -> None:
        for send in sends:
            try:
                await send
            except Exception as err:  # the connection went: the caller's attempt times out
                log.warning("worker %s: cannot answer: %s", self.name,
                            clean(str(err) or type(err).__name__, 200))

    async def drain(self) -> None:
        """Stop taking requests, answer the ones taken, close."""
        if self._draining or self._nc is None:
            return
        self._draining = True
        for svc in self._services.values():
            await self._drain_endpoints(svc)
        while self._inflight or self._lane.pending:
            if self._inflight:
                await asyncio.gather(*list(self._inflight), return_exceptions=True)
            else:  # calls on the lane: their answers come back as a batch and a task
                await asyncio.sleep(0.005)
        if self._cancels is not None:  # heard until the last call it could stop ended
            with contextlib.suppress(Exception):
                await self._cancels.unsubscribe()
        for svc in self._services.values():
            with contextlib.suppress(Exception):
                await svc.stop()
        with contextlib.suppress(Exception):
            await self._nc.drain()
        # Every call taken was answered above; the pool's idle threads are daemons.

    @staticmethod
    async def _drain_endpoints(svc: Service) -> None:
        # nats-py's Service.stop() unsubscribes, dropping what the server already
        # sent; a subscription's drain hands those to the handler first.
        for endpoint in list(getattr(svc, "_endpoints", [])):
            sub = getattr(endpoint, "_subscription", None)
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.drain()
        svc._endpoints = []  # drained above: stop() must not unsubscribe them again

    async def _stop_service(self, svc: Service) -> None:
        await self._drain_endpoints(svc)
        with contextlib.suppress(Exception):
            await svc.stop()

    async def serve_forever(self, ready: asyncio.Event | None = None,
                            follow_s: float | None = None) -> None:
        """Start, then serve until SIGTERM or SIGINT, then drain. With `follow_s`,
        look that often for plugins a rescan loaded or unloaded (`resync`)."""
        await self.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        if ready is not None:
            ready.set()
        while True:
            try:
                await asyncio.wait_for(stop.wait(), follow_s)
                break
            except asyncio.TimeoutError:
                await self.resync()
        log.info("worker %s draining", self.name)
        await self.drain()
