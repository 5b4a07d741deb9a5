"""Calling remote extensions: contract, timeout, retry, circuit breaker, metrics.

A timeout, no responder, a broken connection, an open circuit, an error answer or
an answer that is not the contract is a failure (`(None, reason)`): the pipeline
then applies its rules as for an in-process stage (a validator's failure is a
reject; `mode` decides for pre and post). Only timeouts, missing responders and
connection errors are retried: an error answer would come back the same.

Every attempt carries its deadline (the earlier of now + `timeout_ms` and the call
tree's deadline) and the call's idempotency key, the same on each attempt: a worker
drops a request whose deadline passed unrun, and a stage's state commit under a key
that already committed is not applied again. No attempt starts once the tree's time
is up.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from wasmext.cluster import notices
from wasmext.cluster.breaker import Breaker
from wasmext.cluster.contract import (
    CALL_ID_HEADER,
    CALLS_LEFT_HEADER,
    CONTENT_TYPE,
    DEADLINE_HEADER,
    DENIALS_HEADER,
    JSON,
    MSGPACK,
    NOTICES_HEADER,
    NOTICES_VERSION,
    TENANT_HEADER,
    TRACE_HEADER,
    CallIds,
    ContractError,
    ExtResponse,
    ProviderResponse,
    Verdict,
    decode,
    encode,
)
from wasmext.cluster.link import down_note
from wasmext.cluster.mapping import (
    answer_from_provider,
    answer_from_response,
    provider_request,
    stage_request,
)
from wasmext.cluster.registry import RemoteExtension
from wasmext.cluster.signed import check_reply
from wasmext.errors import SignatureInvalid
from wasmext.ids import random_hex
from wasmext.observe import tracing
from wasmext.text import clean

if TYPE_CHECKING:
    from nats.aio.msg import Msg

    from wasmext.cluster.link import NatsLink

__all__ = ["TENANT_HEADER", "TRACE_HEADER", "RemoteCaller", "RemoteStats"]

WORKER_HEADER = "Wasmext-Worker"
SERVICE_ERROR = "Nats-Service-Error"
SERVICE_ERROR_CODE = "Nats-Service-Error-Code"
_SAMPLES = 2048


@dataclass
class RemoteStats:
    """What the caller saw of one remote extension (`wasmext_cli` and metrics read it)."""

    calls: int = 0
    ok: int = 0
    failed: int = 0
    timeouts: int = 0
    retries: int = 0
    short_circuited: int = 0
    unsigned: int = 0  # answers refused: not signed by a trusted worker
    latencies_ms: list[float] = field(default_factory=list)  # the newest, in no order
    by_worker: dict[str, int] = field(default_factory=dict)  # answers per worker name
    _oldest: int = 0  # where the next sample goes once `latencies_ms` is full

    def observe(self, ms: float) -> None:
        """Record one answer's latency (the newest `_SAMPLES` are kept: a full list has
        its oldest overwritten, where dropping the head moved every sample per call)."""
        samples = self.latencies_ms
        if len(samples) < _SAMPLES:
            samples.append(ms)
            return
        samples[self._oldest] = ms
        self._oldest = (self._oldest + 1) % _SAMPLES

    def quantile(self, q: float) -> float | None:
        """The q quantile of the recent latencies, or None before any."""
        data = sorted(self.latencies_ms)
        return data[min(len(data) - 1, int(q * len(data)))] if data else None


def _span_attributes(ext: RemoteExtension) -> dict[str, Any]:
    return {"wasmext.extension": tracing.text(ext.id), "wasmext.stage": ext.type,
            "messaging.system": "nats", "messaging.destination.name": tracing.text(ext.subject)}


def _outcome(traced: tracing.Tracing, span: Any, outcome: tuple[Any, str | None]
             ) -> tuple[Any, str | None]:
    """Note a remote call's outcome on its span; returns it."""
    if outcome[1] is None:
        span.set_attribute("wasmext.outcome", "ok")
    else:
        span.set_attribute("wasmext.outcome", "failed")
        traced.failed(span, outcome[1])
    return outcome


def _count(by_worker: dict[str, int], worker: str) -> None:
    """One more answer from `worker` (at most 256 names are kept: they come off the wire)."""
    if worker in by_worker or len(by_worker) < 256:
        by_worker[worker] = by_worker.get(worker, 0) + 1


class _Route:
    """What every call to one remote extension shares, worked out once: its stats and
    breaker, encoding, timeout and attempts, and how its answer is read."""

    __slots__ = ("attempts", "breaker", "encoding", "ext", "kind", "peer", "request",
                 "stats", "subject", "timeout_s")

    def __init__(self, ext: RemoteExtension, stats: RemoteStats, breaker: Breaker) -> None:
        self.ext, self.stats, self.breaker = ext, stats, breaker
        self.subject = ext.subject
        self.encoding = MSGPACK if ext.encoding == "msgpack" else JSON
        self.timeout_s = ext.timeout_ms / 1000
        self.attempts = ext.retry + 1
        self.peer = f"extension {ext.id}"
        self.kind = ext.type
        self.request = provider_request if ext.type == "provider" else stage_request

    def answer(self, data: Any, raw: bytes, encoding: str) -> Any:
        """An answer's body in the in-process shape, or a _Failure (not the contract)."""
        peer = self.peer
        try:
            if self.kind == "validator":
                verdict = decode(raw, Verdict, encoding, peer=peer)
                # The reason reaches logs and errors: one inert line (details stay data).
                return {"status": verdict.status, "details": verdict.details,
                        "reason": None if verdict.reason is None else clean(verdict.reason, 300)}
            if self.kind == "provider":
                return answer_from_provider(data, decode(raw, ProviderResponse, encoding,
                                                         peer=peer))
            return answer_from_response(decode(raw, ExtResponse, encoding, peer=peer))
        except ContractError as err:
            raise _Failure(f"answer is not the contract: {err.message}", False) from None


class _Failure(Exception):
    def __init__(self, reason: str, retryable: bool) -> None:
        super().__init__(reason)
        self.reason, self.retryable = reason, retryable


class RemoteCaller:
    """Calls the extensions of `registry` over `link`; one breaker and stats per extension."""

    def __init__(self, registry: Mapping[str, RemoteExtension], link: NatsLink, *,
                 trusted_workers: tuple[str, ...] = ()) -> None:
        self.registry = dict(registry)
        self.link = link
        # Non-empty: an answer counts only when signed by one of these (cluster.signed).
        self.trusted_workers = tuple(trusted_workers)
        self.breakers = {e.id: Breaker(e.breaker_failures, e.breaker_reset_ms / 1000)
                         for e in self.registry.values()}
        self.stats = {e.id: RemoteStats() for e in self.registry.values()}
        self._lock = threading.Lock()
        self._worker_names: dict[str, str] = {}  # as answers name them -> cleaned
        self._routes: dict[str, _Route] = {}  # by extension id, made on first call

    def call(self, ext: RemoteExtension, data: Any, ids: CallIds
             ) -> tuple[Any, str | None]:
        """(the in-process shaped answer, None) or (None, why it failed)."""
        traced = tracing.ACTIVE
        if traced is None:
            return self._call(ext, data, ids)
        with traced.span(f"wasmext.remote {ext.type}", _span_attributes(ext),
                         kind="client") as span:
            return _outcome(traced, span, self._call(ext, data, ids))

    def _call(self, ext: RemoteExtension, data: Any, ids: CallIds
              ) -> tuple[Any, str | None]:
        attempts = self._attempts(ext, data, ids)
        try:
            subject, payload, headers, timeout_s = next(attempts)
            while True:
                try:
                    reply: Any = self.link.request(subject, payload, headers, timeout_s)
                except Exception as exc:  # judged by _attempts: retry or not
                    reply = exc
                subject, payload, headers, timeout_s = attempts.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def acall(self, ext: RemoteExtension, data: Any, ids: CallIds
              ) -> Coroutine[Any, Any, tuple[Any, str | None]]:
        """`call` for an async caller: each attempt awaited, no thread blocked (the
        coroutine to await; untraced, the attempts' own, one frame less per resume)."""
        traced = tracing.ACTIVE
        if traced is None:
            return self._acall(ext, data, ids)
        return self._atraced(traced, ext, data, ids)

    async def _atraced(self, traced: tracing.Tracing, ext: RemoteExtension, data: Any,
                       ids: CallIds) -> tuple[Any, str | None]:
        with traced.span(f"wasmext.remote {ext.type}", _span_attributes(ext),
                         kind="client") as span:
            return _outcome(traced, span, await self._acall(ext, data, ids))

    async def _acall(self, ext: RemoteExtension, data: Any, ids: CallIds
                     ) -> tuple[Any, str | None]:
        attempts = self._attempts(ext, data, ids)
        try:
            subject, payload, headers, timeout_s = next(attempts)
            while True:
                try:
                    reply: Any = await self.link.arequest(subject, payload, headers, timeout_s)
                except Exception as exc:
                    reply = exc
                subject, payload, headers, timeout_s = attempts.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _route(self, ext: RemoteExtension) -> _Route:
        """What every call to `ext` shares, made once (an extension object not in the
        registry, or replaced there, gets its own, unkept; so do stats and a breaker put
        in `stats` and `breakers` since: `live` hands a reloaded caller the old ones)."""
        stats, breaker = self.stats[ext.id], self.breakers[ext.id]
        route = self._routes.get(ext.id)
        if route is None or route.ext is not ext or route.stats is not stats \
                or route.breaker is not breaker:
            route = _Route(ext, stats, breaker)
            if self.registry.get(ext.id) is ext and len(self._routes) < 4096:
                self._routes[ext.id] = route
        return route

    def _attempts(self, ext: RemoteExtension, data: Any, ids: CallIds
                  ) -> Generator[tuple[str, bytes, dict[str, str], float], Any,
                                 tuple[Any, str | None]]:
        """The retry rules: yields each attempt (subject, body, headers, timeout), is sent
        the reply (or the exception the request raised), returns the outcome."""
        route = self._route(ext)
        stats, breaker, lock = route.stats, route.breaker, self._lock
        payload = encode(route.request(ext.id, data, ids.trace_id, ids.tenant_id),
                         route.encoding)
        headers = {TRACE_HEADER: ids.trace_id, TENANT_HEADER: ids.tenant_id,
                   CALL_ID_HEADER: random_hex()}
        if route.encoding != JSON:  # JSON is the contract's default: a header costs both sides
            headers[CONTENT_TYPE] = route.encoding
        if ids.calls_left is not None:
            headers[CALLS_LEFT_HEADER] = str(max(0, ids.calls_left))
        if ids.note is not None:  # the run notes what the worker denied the stage
            headers[NOTICES_HEADER] = NOTICES_VERSION
        if tracing.ACTIVE is not None:  # the worker's spans join this call's trace (W3C)
            tracing.ACTIVE.inject(headers)
        with lock:
            stats.calls += 1
        reason = "no attempt"
        for attempt in range(route.attempts):
            started = time.monotonic()
            timeout_s = route.timeout_s
            if ids.deadline is not None:
                timeout_s = min(timeout_s, ids.deadline - started)
                if timeout_s <= 0:
                    reason = "the call tree's time is up" + (f" (after {reason})"
                                                            if attempt else "")
                    break
            if not breaker.allow():
                with lock:
                    stats.short_circuited += 1
                    stats.failed += 1
                return None, f"extension {ext.id}: {breaker.refusal()}"
            if attempt:
                with lock:
                    stats.retries += 1
            # Wall-clock: the worker is another process, perhaps another machine.
            headers[DEADLINE_HEADER] = str(int((time.time() + timeout_s) * 1000))
            reply = yield route.subject, payload, headers, timeout_s
            try:
                answer, worker = self._answer(route, data, headers, timeout_s, reply,
                                              ids.note)
            except _Failure as failure:
                reason = failure.reason
                breaker.failed(started, clean(reason, 300))
                if failure.retryable:
                    continue
                break
            breaker.succeeded()
            ms = (time.monotonic() - started) * 1000
            with lock:  # one hold for everything an answer counts
                stats.ok += 1
                stats.observe(ms)
                _count(stats.by_worker, worker)
            return answer, None
        with lock:
            stats.failed += 1
        return None, f"extension {ext.id}: {reason}"

    def _failure(self, ext: RemoteExtension, timeout_s: float, error: BaseException
                 ) -> NoReturn:
        """Raise the _Failure a request's exception is (all of them may be retried)."""
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout

        if isinstance(error, (NatsTimeout, TimeoutError, asyncio.TimeoutError)):
            with self._lock:
                self.stats[ext.id].timeouts += 1
            raise _Failure(f"timeout after {round(timeout_s * 1000)} ms"
                           f"{down_note(self.link)}", True)
        if isinstance(error, NoRespondersError):
            # The usual cause is a subject no worker serves (a typo, another prefix or
            # major version, or no worker up): say where to look.
            raise _Failure(f"no responders on {ext.subject}: no worker serves it"
                           " (wasmext nats ls lists the subjects served)", True)
        # the connection: closed, reconnecting, refused
        raise _Failure(f"network error: {clean(type(error).__name__)}", True)

    def _answer(self, route: _Route, data: Any, headers: dict[str, str],
                timeout_s: float, reply: Any,
                note: notices.Note | None = None) -> tuple[Any, str]:
        """The in-process shaped answer of one attempt's reply and the worker that sent
        it (the caller counts it), or a _Failure (the worker, if any, counted); the
        reply's denial notices, whatever the outcome, go to `note`."""
        ext = route.ext
        if isinstance(reply, BaseException):
            self._failure(ext, timeout_s, reply)
        msg: Msg = reply
        hdrs = msg.headers or {}
        if self.trusted_workers:
            try:
                check_reply(ext.subject, headers[CALL_ID_HEADER], hdrs, msg.data,
                            self.trusted_workers)
            except SignatureInvalid as err:
                # Someone other than a trusted worker took the request: another attempt
                # may reach one.
                with self._lock:
                    route.stats.unsigned += 1
                raise _Failure(err.message, True) from None
        raw_worker = hdrs.get(WORKER_HEADER, "?")
        worker = self._worker_names.get(raw_worker)
        if worker is None:
            worker = clean(raw_worker, 64)
            if len(self._worker_names) < 256:  # names off the wire: a bounded memo
                self._worker_names[raw_worker] = worker
        if note is not None:
            denied = hdrs.get(DENIALS_HEADER)
            if denied is not None:
                note(route.ext.id, worker, notices.from_header(denied))
        try:
            if SERVICE_ERROR in hdrs or SERVICE_ERROR_CODE in hdrs:
                code = hdrs.get(SERVICE_ERROR_CODE, "?")
                # 503: the worker could not run the call (its instance pool or its
                # storage), nothing was applied: another worker may.
                raise _Failure(f"error {clean(code, 32)}: "
                               f"{clean(hdrs.get(SERVICE_ERROR, ''), 300)}", code == "503")
            encoding = MSGPACK if CONTENT_TYPE in hdrs \
                and hdrs[CONTENT_TYPE].lower() == MSGPACK else JSON
            return route.answer(data, msg.data, encoding), worker
        except _Failure:
            with self._lock:  # an answer all the same: its worker is counted
                _count(route.stats.by_worker, worker)
            raise
