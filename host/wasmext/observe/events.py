"""The in-process event bus: namespaced topics, grants, per-subscriber queues, rate limits.

Emitting never runs a subscriber: it queues the event for each matching subscriber and
returns. Each subscriber (a Python subscription, or all of one plugin's) has its own
bounded queue, in events and in the bytes of plugins' payloads (`queue_bytes`: a 256 KiB
payload of empty maps decodes to ~15 MB of Python objects, so a count alone let a slow
subscriber hold gigabytes); a full queue drops the new event for that subscriber only
(counted, and logged once per burst). Worker threads, started on demand up to `workers`, serve the
busy queues round-robin, at most one worker per queue, in emit order: a slow subscriber
holds one worker and loses only its own events. Plugins need grants, are rate-limited
and cannot emit runtime events. Topics, grants and errors live in
`wasmext.observe.topics` (re-exported here). See docs/events-and-metrics.md.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from wasmext.forks import renew_in_children
from wasmext.observe.topics import (
    APP,
    HOST,
    OUTCOMES,
    RUNTIME_EVENTS,
    BusClosed,
    CascadeLimit,
    EventDenied,
    EventError,
    InvalidTopic,
    Predicate,
    RateLimited,
    TooManySubscriptions,
    check_pattern,
    check_topic,
    grants_predicate,
    is_reserved,
    pattern_covers,
    runtime_event,
    topic_matches,
)

__all__ = [
    "RUNTIME_EVENTS", "BusClosed", "CascadeLimit", "Event", "EventBus", "EventDenied",
    "EventError", "InvalidTopic", "RateLimited", "Subscription", "TooManySubscriptions",
    "check_pattern",
    "check_topic", "grants_predicate", "is_reserved", "pattern_covers", "runtime_event",
    "topic_matches",
]

log = logging.getLogger("wasmext.observe.events")


@dataclass(frozen=True)
class Event:
    """One emitted event; the payload is shared by every subscriber: treat it as read-only."""

    topic: str
    payload: Any
    source: str | None  # the emitting plugin's id, None for the host or the app
    seq: int
    time: float
    depth: int = 0  # 0 unless emitted from inside a delivery
    size: int = 0  # a plugin's payload: its MessagePack bytes (0: the host's or the app's)


@dataclass(eq=False)
class _Lane:
    """One subscriber's bounded queue: a Python subscription's, or all of one plugin's."""

    name: str  # the `subscriber` label of its drops: the plugin id or the given name
    capacity: int
    queue: deque[tuple[Subscription, Event]] = field(default_factory=deque)
    queued_bytes: int = 0  # the sizes of its events not yet delivered (queued or taken)
    scheduled: bool = False  # in the ready queue or being delivered by a worker
    burst: int = 0  # events dropped since the burst began (0: not dropping)
    burst_start: float = 0.0


_Report = tuple[str, int, float]  # a drop burst to log: subscriber, events dropped, seconds


class Subscription:
    """Call it or `.close()` it to unsubscribe: no new delivery starts after that."""

    def __init__(self, bus: EventBus, patterns: tuple[str, ...], call: Callable[[Event], None],
                 plugin_id: str | None, lane: _Lane) -> None:
        self.patterns, self.plugin_id, self.active = patterns, plugin_id, True
        self.delivered = self.dropped = self.failed = 0
        self._bus, self._call, self._lane = bus, call, lane

    @property
    def name(self) -> str:
        """The subscriber's name: the plugin id, or the name given to `subscribe`."""
        return self._lane.name

    def close(self) -> None:
        """Unsubscribe from the bus."""
        self._bus._unsubscribe(self)

    __call__ = close


def _deny(plugin_id: str, topic: str) -> bool:
    return False


def _callable_name(callback: object) -> str:
    name = getattr(callback, "__qualname__", None) or type(callback).__qualname__
    return f"{APP}:{name}"


class EventBus:
    """Deny-by-default for plugins; the host and the embedding app are trusted."""

    turn_s = 0.001  # a busy queue's turn on a worker when other queues are waiting
    batch = 32  # events a worker takes from a queue at once (their room is free again)
    idle_exit_s = 5.0  # a worker idle this long exits (another starts on demand)
    report_s = 60.0  # a drop burst that lasts is logged at least this often
    # Patterns one plugin may hold: every emit, by anyone, matches each of them under
    # the lock (120,000 of them made every emit on the bus cost 15 ms).
    max_plugin_patterns = 64

    def __init__(self, *, may_emit: Predicate = _deny, may_subscribe: Predicate = _deny,
                 queue_size: int = 1000, workers: int = 8, rate: float = 100.0,
                 burst: int = 200, max_depth: int = 8, queue_bytes: int = 4 << 20,
                 observer: Callable[[str, str], None] | None = None,
                 drop_observer: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if queue_size < 1 or workers < 1 or burst < 1 or rate < 0 or max_depth < 0 \
                or queue_bytes < 1:
            raise ValueError("queue_size, queue_bytes, workers and burst must be >= 1, rate "
                             "and depth >= 0")
        self.may_emit, self.may_subscribe = may_emit, may_subscribe
        self.queue_size, self.max_depth, self.observer = queue_size, max_depth, observer
        self.queue_bytes = queue_bytes
        self.drop_observer = drop_observer
        self._rate, self._burst, self._clock, self._nworkers = rate, burst, clock, workers
        self._lock = threading.Lock()
        self._work, self._idle = threading.Condition(self._lock), threading.Condition(self._lock)
        self._subs: list[Subscription] = []
        self._plugin_lanes: dict[str, _Lane] = {}
        self._buckets: dict[str, tuple[float, float]] = {}  # plugin: (tokens, stamp)
        self._limits: dict[str, tuple[float, int]] = {}
        self._ready: deque[_Lane] = deque()  # queues with events and no worker, in turn
        self._pending = 0  # queued plus in-flight deliveries
        self._seq = itertools.count(1)
        self._names = itertools.count()
        self._threads: list[threading.Thread] = []
        self._waiting = 0  # workers waiting for a ready queue
        self._closed = self._stopping = False
        self._local = threading.local()
        self.counts: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        renew_in_children(self)

    def subscribe(self, pattern: str, callback: Callable[[Event], None], *,
                  queue_size: int | None = None, name: str | None = None) -> Subscription:
        """A Python subscriber (trusted, no grant): `callback(event)` on a worker thread.
        `name` labels its drops in metrics and logs (default `_app:<callback's qualname>`)."""
        lane = _Lane(name or _callable_name(callback), queue_size or self.queue_size)
        return self._add(None, (check_pattern(pattern),), callback, lane)

    def subscribe_plugin(self, plugin_id: str, patterns: str | Iterable[str],
                         deliver: Callable[[str, str, Any], None]) -> Subscription:
        """`deliver(plugin_id, topic, payload)` per event; each pattern needs a grant, else
        EventDenied; more than `max_plugin_patterns` in all, TooManySubscriptions. A
        plugin's subscriptions share one queue, delivered one at a time."""
        items = [patterns] if isinstance(patterns, str) else list(patterns)
        # Far too many is refused before each is checked; repeats count once.
        pats: tuple[str, ...] = ()
        count = len(items)
        if count <= 16 * self.max_plugin_patterns:
            pats = tuple(dict.fromkeys(check_pattern(p) for p in items))
            count = len(pats)
        with self._lock:
            held = sum(len(s.patterns) for s in self._subs if s.plugin_id == plugin_id)
            wanted = held + count
            if wanted > self.max_plugin_patterns:
                self._note(plugin_id, "denied")
        if wanted > self.max_plugin_patterns:
            raise TooManySubscriptions(
                f"plugin {plugin_id} subscribes to {wanted} patterns; the bus takes at "
                f"most {self.max_plugin_patterns} a plugin", plugin_id=plugin_id)
        for p in pats:
            if not self._allowed(self.may_subscribe, plugin_id, p):
                self._refuse(plugin_id, f"subscribe to {p!r}")
        return self._add(plugin_id, pats, lambda e: deliver(plugin_id, e.topic, e.payload),
                         _Lane(plugin_id, self.queue_size))

    def _add(self, plugin_id: str | None, pats: tuple[str, ...], call: Callable[[Event], None],
             lane: _Lane) -> Subscription:
        with self._lock:
            if self._closed:
                raise BusClosed("the event bus is closed")
            if plugin_id is not None:
                lane = self._plugin_lanes.setdefault(plugin_id, lane)
            sub = Subscription(self, pats, call, plugin_id, lane)
            self._subs.append(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if not sub.active:
                return
            sub.active = False
            self._subs.remove(sub)

    def set_rate_limit(self, plugin_id: str, rate: float, burst: int) -> None:
        """One plugin's token bucket: `rate` events per second, at most `burst` at once."""
        with self._lock:
            self._limits[plugin_id] = (rate, burst)
            self._buckets.pop(plugin_id, None)

    def emit(self, topic: str, payload: Any = None) -> int:
        """Emit as the host or the app (no grant, no rate limit); returns deliveries queued."""
        return self._emit(None, check_topic(topic), payload)

    def emit_runtime(self, topic: str, **fields: Any) -> int:
        """Emit a standard runtime event, its payload checked against RUNTIME_EVENTS."""
        return self._emit(None, topic, runtime_event(topic, **fields))

    def emit_from(self, plugin_id: str, topic: object, payload: Any = None,
                  size: int = 0) -> int:
        """A plugin's `event.emit`: InvalidTopic, EventDenied, RateLimited, CascadeLimit.
        `size` is the payload's MessagePack length, counted against `queue_bytes`."""
        checked = check_topic(topic)
        if is_reserved(checked) or not self._allowed(self.may_emit, plugin_id, checked):
            self._refuse(plugin_id, f"emit {checked!r}")
        return self._emit(plugin_id, checked, payload, size)

    def _emit(self, source: str | None, topic: str, payload: Any, size: int = 0) -> int:
        depth = getattr(self._local, "depth", -1) + 1
        with self._lock:
            if self._closed:
                raise BusClosed("the event bus is closed")
            if depth > self.max_depth:
                self._note(source or HOST, "cascade_limit")
                raise CascadeLimit(f"event {topic!r} emitted {depth} deliveries deep "
                                   f"(max {self.max_depth})", plugin_id=source)
            if source is not None and not self._take_token(source):
                self._note(source, "rate_limited")
                raise RateLimited(f"plugin {source} emits events faster than its rate limit",
                                  plugin_id=source)
            self._note(source or HOST, "emitted")
            event = Event(topic, payload, source, next(self._seq), time.time(), depth, size)
            return sum(self._enqueue(sub, event) for sub in self._subs
                       if any(topic_matches(p, topic) for p in sub.patterns))

    def _enqueue(self, sub: Subscription, event: Event) -> bool:
        lane = sub._lane
        # Drop the newest: the queue keeps its order. The bytes count what a worker took
        # and has not delivered yet too; one event always has room when nothing is
        # waiting, whatever its size (the request cap bounds it).
        if len(lane.queue) >= lane.capacity or (
                lane.queued_bytes and lane.queued_bytes + event.size > self.queue_bytes):
            sub.dropped += 1
            if not lane.burst:
                lane.burst_start = self._clock()
            lane.burst += 1
            self._note(sub.plugin_id or APP, "dropped")
            if self.drop_observer is not None:
                try:
                    self.drop_observer(lane.name)
                except Exception:
                    log.exception("event drop observer failed")
            return False
        lane.queue.append((sub, event))
        lane.queued_bytes += event.size
        self._pending += 1
        if not lane.scheduled:
            lane.scheduled = True
            self._ready.append(lane)
            if len(self._ready) > self._waiting and len(self._threads) < self._nworkers:
                self._start_worker()
            else:
                self._work.notify()
        return True

    def _start_worker(self) -> None:
        """One more worker thread (the lock is held)."""
        t = threading.Thread(target=self._worker, daemon=True,
                             name=f"wasmext-events-{next(self._names)}")
        self._threads.append(t)
        t.start()

    def _after_fork(self) -> None:
        """In a forked child: none of the parent's workers is there (and the lock may
        have been held by one), and the child started none while the list named them:
        its events were delivered by nobody and `flush` waited for good. What was queued
        before the fork is the parent's to deliver (twice would run each subscriber
        twice): the child starts with empty queues and workers of its own on demand."""
        if self._stopping:
            return
        self._lock = threading.Lock()
        self._work, self._idle = threading.Condition(self._lock), threading.Condition(self._lock)
        self._threads, self._waiting, self._pending = [], 0, 0
        for lane in (*self._ready, *self._plugin_lanes.values(),
                     *(sub._lane for sub in self._subs)):
            lane.queue.clear()
            lane.queued_bytes, lane.scheduled = 0, False
        self._ready.clear()

    def _take_token(self, plugin_id: str) -> bool:
        """The token bucket (the lock is held): refill by elapsed time, take one if there."""
        rate, burst = self._limits.get(plugin_id, (self._rate, self._burst))
        now = self._clock()
        tokens, stamp = self._buckets.get(plugin_id, (float(burst), now))
        tokens = min(float(burst), tokens + (now - stamp) * rate)
        self._buckets[plugin_id] = (tokens - 1.0 if tokens >= 1.0 else tokens, now)
        return tokens >= 1.0

    def _worker(self) -> None:
        """Serve ready queues: take up to `batch` events of one at a time and deliver them
        in order; keep the queue until it is empty or, when other queues wait, until its
        turn is over (then it goes to the back of the line, what was taken put back)."""
        self._local.worker = True
        lane: _Lane | None = None
        taken: deque[tuple[Subscription, Event]] = deque()
        done: list[tuple[Subscription, str, int]] = []  # subscription, outcome, size
        turn_end = 0.0
        while True:
            reports: list[_Report] = []
            with self._lock:
                if lane is not None:  # the previous batch is done
                    for sub, outcome, size in done:
                        self._note(sub.plugin_id or APP, outcome)
                        lane.queued_bytes -= size
                    self._pending -= len(done)
                    lane.queue.extendleft(reversed(taken))  # cut short: back, in order
                    done, taken = [], deque()
                    lane = self._after(lane, turn_end, reports)
                    self._pending += bool(reports)  # flush() waits for the log line too
                if not reports:
                    if lane is None:
                        lane = self._next_lane()
                        if lane is None:
                            return
                        turn_end = time.perf_counter() + self.turn_s
                    queue = lane.queue
                    taken = deque(queue.popleft() for _ in range(min(self.batch, len(queue))))
            if reports:  # logged outside the lock, then round again
                self._log_bursts(reports)
                with self._lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.notify_all()
                continue
            while taken:
                sub, event = taken.popleft()
                done.append((sub, self._deliver(sub, event), event.size))
                if self._stopping or (self._ready and time.perf_counter() >= turn_end):
                    break

    def _after(self, lane: _Lane, turn_end: float, reports: list[_Report]) -> _Lane | None:
        """After a delivery (the lock is held): keep the queue, requeue it or unschedule it."""
        if lane.burst and (len(lane.queue) <= lane.capacity // 2
                           or self._clock() - lane.burst_start >= self.report_s):
            reports.append(self._end_burst(lane))  # half empty again, or lasting: log it
        if not lane.queue or self._stopping:
            reports.extend(self._discard(lane))  # empty, or closing: unschedule, wake flush()
            return None
        if self._ready and time.perf_counter() >= turn_end:
            self._ready.append(lane)  # its turn is over: the others waiting go first
            return None
        return lane

    def _next_lane(self) -> _Lane | None:
        """The next ready queue (the lock is held); None: the worker exits (idle or closing)."""
        while not self._ready and not self._stopping:
            self._waiting += 1
            woke = self._work.wait(self.idle_exit_s)
            self._waiting -= 1
            if not woke and not self._ready:
                break
        if self._ready:
            return self._ready.popleft()
        self._threads.remove(threading.current_thread())
        return None

    def _deliver(self, sub: Subscription, event: Event) -> str:
        if not sub.active:
            return "skipped"
        self._local.depth = event.depth
        try:
            sub._call(event)
        except BaseException:  # a subscriber must never stop the others or the worker
            sub.failed += 1
            log.exception("event subscriber failed on %s", event.topic,
                          extra={"plugin_id": sub.plugin_id, "hook": "on_event",
                                 "outcome": "failed", "topic": event.topic})
            return "failed"
        finally:
            del self._local.depth
        sub.delivered += 1
        return "delivered"

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until all queued events, and those they cause, are delivered; False on timeout."""
        if getattr(self._local, "worker", False):
            raise RuntimeError("flush() called from an event subscriber")
        with self._lock:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float | None = 5.0) -> bool:
        """Refuse emits, deliver the queue for up to `timeout` (then discard it), stop the
        workers (each joined for up to `timeout`: one stuck in a subscriber is left)."""
        with self._lock:
            self._closed = True
        in_worker = getattr(self._local, "worker", False)
        drained = False if in_worker else self.flush(timeout)
        reports: list[_Report] = []
        with self._lock:
            self._stopping = True
            while self._ready:
                reports.extend(self._discard(self._ready.popleft()))
            self._work.notify_all()
            threads = [t for t in self._threads if t is not threading.current_thread()]
        self._log_bursts(reports)
        for t in threads:
            t.join(timeout)
        return drained

    def _discard(self, lane: _Lane) -> list[_Report]:
        """Unschedule a lane, dropping what it still holds (the lock is held)."""
        for sub, _event in lane.queue:
            self._note(sub.plugin_id or APP, "discarded")
        self._pending -= len(lane.queue)
        lane.queued_bytes -= sum(event.size for _sub, event in lane.queue)
        lane.queue.clear()
        lane.scheduled = False
        if self._pending == 0:
            self._idle.notify_all()
        return [self._end_burst(lane)] if lane.burst else []

    def _end_burst(self, lane: _Lane) -> _Report:
        report = (lane.name, lane.burst, self._clock() - lane.burst_start)
        lane.burst = 0
        return report

    @staticmethod
    def _log_bursts(reports: list[_Report]) -> None:
        for name, count, seconds in reports:
            log.warning("event subscriber %s fell behind: %d event(s) dropped in %.3f s "
                        "(its queue was full)", name, count, seconds,
                        extra={"subscriber": name, "outcome": "dropped", "dropped": count})

    def _refuse(self, plugin_id: str, what: str) -> NoReturn:
        with self._lock:
            self._note(plugin_id, "denied")
        raise EventDenied(f"plugin {plugin_id} may not {what}", plugin_id=plugin_id)

    @staticmethod
    def _allowed(predicate: Predicate, plugin_id: str, topic: str) -> bool:
        try:
            return bool(predicate(plugin_id, topic))
        except Exception:
            log.exception("event grant check failed", extra={"plugin_id": plugin_id})
            return False

    def _note(self, subject: str, outcome: str) -> None:
        """Count an outcome (the lock is held)."""
        self.counts[outcome] += 1
        if self.observer is not None:
            try:
                self.observer(subject, outcome)
            except Exception:
                log.exception("event observer failed")
