"""The event bus across hosts: local events out to `<prefix>.events.<topic>`, remote in.

Out: events matching the bridge's patterns (already past the emitter's `emit:` grant)
are published as JSON `{"topic", "payload", "source"}`. In: events from other hosts
are emitted on the local bus, where each plugin receives them only under its own
`subscribe:` grants, as any event. Runtime namespaces (`session.*`, `turn.*`, ...)
are the local host's alone: arriving ones are dropped, not forged. An event that came
in is never sent out again, so two bridged hosts do not echo events for ever.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from wasmext.cluster.contract import MAX_BYTES
from wasmext.cluster.link import NatsLink
from wasmext.cluster.natsauth import NatsAuth
from wasmext.cluster.registry import check_prefix
from wasmext.observe.events import Event, EventBus, EventError, check_topic, is_reserved

if TYPE_CHECKING:
    from nats.aio.msg import Msg
    from nats.aio.subscription import Subscription as NatsSubscription

__all__ = ["ORIGIN_HEADER", "EventBridge"]

log = logging.getLogger("wasmext.cluster.bridge")
ORIGIN_HEADER = "Wasmext-Origin"
_REMEMBERED = 4096


class EventBridge:
    """Bridges a local event bus to NATS, out and (optionally) in."""

    def __init__(self, bus: EventBus, url: str, *, prefix: str = "wasmext",
                 patterns: Iterable[str] = ("*",), inbound: bool = True,
                 auth: NatsAuth | None = None) -> None:
        self.bus, self.prefix = bus, check_prefix(prefix)
        self.origin = uuid.uuid4().hex
        self.published = self.received = self.dropped = 0
        # Payload objects this bridge emitted (kept alive so their ids stay unique).
        self._came_in: OrderedDict[int, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._oversize_seen = False
        self.link = NatsLink(url, name="wasmext-event-bridge", auth=auth)
        self._subs = [bus.subscribe(p, self._out, name="_nats:bridge") for p in patterns]
        self._inbound: NatsSubscription | None = None
        if inbound:
            self._inbound = self.link.run(self.link.client.subscribe(
                f"{self.prefix}.events.>", cb=self._in), 5.0)
            self.link.run(self.link.client.flush(), 5.0)

    def _out(self, event: Event) -> None:
        with self._lock:
            if id(event.payload) in self._came_in and event.source is None:
                return
        try:
            body = json.dumps({"topic": event.topic, "payload": event.payload,
                               "source": event.source}).encode()
        except (TypeError, ValueError):
            with self._lock:
                self.dropped += 1
            return
        limit = self.link.client.max_payload or MAX_BYTES
        if len(body) > limit:
            # A payload within the emitter's caps can grow past the server's max_payload as
            # JSON (each control character becomes six): dropped and counted, never a
            # publish the client refuses with a traceback per event.
            with self._lock:
                self.dropped += 1
                first, self._oversize_seen = not self._oversize_seen, True
            if first:
                log.warning("event %s not bridged: %d bytes as JSON, over the NATS server's "
                            "max_payload of %d (further ones are only counted)", event.topic,
                            len(body), limit)
            return
        self.link.run(self.link.client.publish(f"{self.prefix}.events.{event.topic}", body,
                                               headers={ORIGIN_HEADER: self.origin}), 5.0)
        with self._lock:
            self.published += 1

    async def _in(self, msg: Msg) -> None:
        if (msg.headers or {}).get(ORIGIN_HEADER) == self.origin:
            return
        topic = msg.subject[len(self.prefix) + len(".events."):]
        try:
            check_topic(topic)
            doc = json.loads(msg.data) if len(msg.data) <= MAX_BYTES else None
        except (EventError, ValueError, RecursionError):
            doc = None
        if not isinstance(doc, dict) or doc.get("topic") != topic or is_reserved(topic):
            with self._lock:
                self.dropped += 1
            return
        payload = doc.get("payload")
        with self._lock:
            self._came_in[id(payload)] = payload
            while len(self._came_in) > _REMEMBERED:
                self._came_in.popitem(last=False)
            self.received += 1
        try:
            self.bus.emit(topic, payload)
        except EventError as err:
            log.warning("bridged event %s not emitted: %s", topic, err.message)

    def close(self) -> None:
        """Unsubscribe from the bus and close the NATS link."""
        for sub in self._subs:
            sub.close()
        self.link.close()
