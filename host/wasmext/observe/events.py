"""The in-process event bus: namespaced topics, grants, bounded queues, rate limits.

Emitting never runs a subscriber: it queues the event for each matching subscriber
(a full queue drops it, counted) and returns; worker threads deliver, one event at a
time per subscriber (per plugin), in emit order. Plugins need grants, are rate-limited
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
    "EventError", "InvalidTopic", "RateLimited", "Subscription", "check_pattern",
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


@dataclass(eq=False)
class _Lane:  # a bounded queue: one per Python subscription, one per plugin
    capacity: int
    queue: deque[tuple[Subscription, Event]] = field(default_factory=deque)
    scheduled: bool = False  # in the ready queue or being delivered by a worker


class Subscription:
    """Call it or `.close()` it to unsubscribe: no new delivery starts after that."""

    def __init__(self, bus: EventBus, patterns: tuple[str, ...], call: Callable[[Event], None],
                 plugin_id: str | None, lane: _Lane) -> None:
        self.patterns, self.plugin_id, self.active = patterns, plugin_id, True
        self.delivered = self.dropped = self.failed = 0
        self._bus, self._call, self._lane = bus, call, lane

    def close(self) -> None:
        self._bus._unsubscribe(self)

    __call__ = close


def _deny(plugin_id: str, topic: str) -> bool:
    return False


class EventBus:
    """Deny-by-default for plugins; the host and the embedding app are trusted."""

    def __init__(self, *, may_emit: Predicate = _deny, may_subscribe: Predicate = _deny,
                 queue_size: int = 1000, workers: int = 1, rate: float = 100.0,
                 burst: int = 200, max_depth: int = 8,
                 observer: Callable[[str, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if queue_size < 1 or workers < 1 or burst < 1 or rate < 0 or max_depth < 0:
            raise ValueError("queue_size, workers and burst must be >= 1, rate and depth >= 0")
        self.may_emit, self.may_subscribe = may_emit, may_subscribe
        self.queue_size, self.max_depth, self.observer = queue_size, max_depth, observer
        self._rate, self._burst, self._clock, self._nworkers = rate, burst, clock, workers
        self._lock = threading.Lock()
        self._work, self._idle = threading.Condition(self._lock), threading.Condition(self._lock)
        self._subs: list[Subscription] = []
        self._plugin_lanes: dict[str, _Lane] = {}
        self._buckets: dict[str, tuple[float, float]] = {}  # plugin: (tokens, stamp)
        self._limits: dict[str, tuple[float, int]] = {}
        self._ready: deque[_Lane] = deque()
        self._pending = 0  # queued plus in-flight deliveries
        self._seq = itertools.count(1)
        self._threads: list[threading.Thread] = []
        self._closed = self._stopping = False
        self._local = threading.local()
        self.counts: dict[str, int] = dict.fromkeys(OUTCOMES, 0)

    def subscribe(self, pattern: str, callback: Callable[[Event], None], *,
                  queue_size: int | None = None) -> Subscription:
        """A Python subscriber (trusted, no grant): `callback(event)` on a worker thread."""
        return self._add(None, (check_pattern(pattern),), callback, queue_size)

    def subscribe_plugin(self, plugin_id: str, patterns: str | Iterable[str],
                         deliver: Callable[[str, str, Any], None]) -> Subscription:
        """`deliver(plugin_id, topic, payload)` per event; each pattern needs a grant, else
        EventDenied. A plugin's subscriptions share one queue, delivered one at a time."""
        items = [patterns] if isinstance(patterns, str) else list(patterns)
        pats = tuple(check_pattern(p) for p in items)
        for p in pats:
            if not self._allowed(self.may_subscribe, plugin_id, p):
                self._refuse(plugin_id, f"subscribe to {p!r}")
        return self._add(plugin_id, pats, lambda e: deliver(plugin_id, e.topic, e.payload), None)

    def _add(self, plugin_id: str | None, pats: tuple[str, ...], call: Callable[[Event], None],
             queue_size: int | None) -> Subscription:
        with self._lock:
            if self._closed:
                raise BusClosed("the event bus is closed")
            lane = _Lane(queue_size or self.queue_size)
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

    def emit_from(self, plugin_id: str, topic: object, payload: Any = None) -> int:
        """A plugin's `event.emit`: InvalidTopic, EventDenied, RateLimited, CascadeLimit."""
        checked = check_topic(topic)
        if is_reserved(checked) or not self._allowed(self.may_emit, plugin_id, checked):
            self._refuse(plugin_id, f"emit {checked!r}")
        return self._emit(plugin_id, checked, payload)

    def _emit(self, source: str | None, topic: str, payload: Any) -> int:
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
            event = Event(topic, payload, source, next(self._seq), time.time(), depth)
            return sum(self._enqueue(sub, event) for sub in self._subs
                       if any(topic_matches(p, topic) for p in sub.patterns))

    def _enqueue(self, sub: Subscription, event: Event) -> bool:
        lane = sub._lane
        if len(lane.queue) >= lane.capacity:  # drop the newest: the queue keeps its order
            sub.dropped += 1
            self._note(sub.plugin_id or APP, "dropped")
            return False
        lane.queue.append((sub, event))
        self._pending += 1
        if not lane.scheduled:
            lane.scheduled = True
            self._ready.append(lane)
            while len(self._threads) < self._nworkers:
                t = threading.Thread(target=self._worker, daemon=True,
                                     name=f"wasmext-events-{len(self._threads)}")
                self._threads.append(t)
                t.start()
            self._work.notify()
        return True

    def _take_token(self, plugin_id: str) -> bool:
        """The token bucket (the lock is held): refill by elapsed time, take one if there."""
        rate, burst = self._limits.get(plugin_id, (self._rate, self._burst))
        now = self._clock()
        tokens, stamp = self._buckets.get(plugin_id, (float(burst), now))
        tokens = min(float(burst), tokens + (now - stamp) * rate)
        self._buckets[plugin_id] = (tokens - 1.0 if tokens >= 1.0 else tokens, now)
        return tokens >= 1.0

    def _worker(self) -> None:
        self._local.worker = True
        while True:
            with self._lock:
                while not self._ready and not self._stopping:
                    self._work.wait()
                if not self._ready:
                    return
                lane = self._ready.popleft()
                sub, event = lane.queue.popleft()
            outcome = self._deliver(sub, event)
            with self._lock:
                self._note(sub.plugin_id or APP, outcome)
                self._pending -= 1
                if lane.queue and not self._stopping:
                    self._ready.append(lane)
                    self._work.notify()
                else:
                    self._discard(lane)  # empty, or closing: unschedule, wake flush()

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
        """Refuse emits, deliver the queue for up to `timeout` (then discard it), stop."""
        with self._lock:
            self._closed = True
        in_worker = getattr(self._local, "worker", False)
        drained = False if in_worker else self.flush(timeout)
        with self._lock:
            self._stopping = True
            while self._ready:
                self._discard(self._ready.popleft())
            self._work.notify_all()
            threads = [t for t in self._threads if t is not threading.current_thread()]
        for t in threads:
            t.join(timeout)
        return drained

    def _discard(self, lane: _Lane) -> None:
        """Unschedule a lane, dropping what it still holds (the lock is held)."""
        for sub, _event in lane.queue:
            self._note(sub.plugin_id or APP, "discarded")
        self._pending -= len(lane.queue)
        lane.queue.clear()
        lane.scheduled = False
        if self._pending == 0:
            self._idle.notify_all()

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
