"""OpenTelemetry tracing, off by default: spans for sessions, hook calls, host calls that
leave the sandbox and remote stages, with W3C trace context across NATS and MCP.

    [tracing]
    enabled = true
    exporter = "otlp-http"          # otlp-http, otlp-grpc or console (stderr)
    endpoint = "http://127.0.0.1:4318/v1/traces"   # default: the exporter's own
    service_name = "wasmext"
    headers = { Authorization = "Bearer ${OTLP_TOKEN}" }
    sample_ratio = 1.0              # of new traces; a caller's choice is followed

The `opentelemetry` packages (`wasmext[otel]`) are imported only when tracing is on:
a host without them imports and runs, and every span here is then skipped by one
module-global check (`ACTIVE is None`). Tracing is process-wide, as OpenTelemetry's
own provider is: the host that switches it on installs it (`activate`), and closing
that host switches it off again. The provider is wasmext's own, so an application's
global provider is left alone; an embedder who wants wasmext's spans in its own
pipeline passes a `Tracing` made from its provider (`Tracing(provider)`).

Every attribute value a plugin (or a peer) can influence goes through `text.clean`:
one inert line of at most `ATTR_CAP` characters, as on every other way out of the
host. Exceptions are never recorded with their traceback or raw message, only as a
cleaned status description.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from wasmext._version import __version__
from wasmext.errors import ConfigError
from wasmext.text import clean

__all__ = ["ACTIVE", "ATTR_CAP", "EXPORTERS", "Tracing", "TracingSettings", "activate",
           "deactivate", "install", "text"]

log = logging.getLogger("wasmext.observe.tracing")
ATTR_CAP = 256      # characters of one attribute value a plugin or a peer controls
STATUS_CAP = 512    # characters of a span's error description
CLOSE_FLUSH_S = 2.0  # how long closing waits for the last batch to reach the collector
EXPORTERS = ("otlp-http", "otlp-grpc", "console")
HTTP_TRACES_PATH = "/v1/traces"

# The tracing spans go to, or None (off): read on every hook call, so a plain global.
ACTIVE: Tracing | None = None
_activating = threading.Lock()

Kind = Literal["internal", "server", "client", "producer", "consumer"]


def text(value: Any, limit: int = ATTR_CAP) -> str:
    """An attribute value from untrusted text: one inert, bounded line."""
    return clean(value, limit)


@dataclass(frozen=True)
class TracingSettings:
    """The [tracing] section: whether spans are made, and where they go."""

    enabled: bool = False
    exporter: str = "otlp-http"
    endpoint: str | None = None
    service_name: str = "wasmext"
    headers: Mapping[str, str] = field(default_factory=dict)
    sample_ratio: float = 1.0
    # The resource's service.instance.id: which process of a service made a span (a
    # `wasmext worker` sets its --name); not a [tracing] field, each process has its own.
    instance_id: str | None = None


def _needs_otel() -> ConfigError:
    return ConfigError("[tracing] enabled needs OpenTelemetry: pip install 'wasmext[otel]'")


def _exporter(settings: TracingSettings) -> Any:
    headers = dict(settings.headers)
    if settings.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)  # stdout is the program's own output
    if settings.exporter == "otlp-grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            raise ConfigError("[tracing] exporter 'otlp-grpc' needs the gRPC exporter: "
                              "pip install 'wasmext[otel]'") from None
        endpoint = settings.endpoint
        insecure = endpoint is not None and endpoint.startswith("http://")
        return GrpcExporter(endpoint=endpoint, headers=headers or None,
                            insecure=insecure or None)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = settings.endpoint
    if endpoint is not None and urlsplit(endpoint).path in ("", "/"):
        endpoint = endpoint.rstrip("/") + HTTP_TRACES_PATH  # a collector's base URL
    return OTLPSpanExporter(endpoint=endpoint, headers=headers or None)


_KINDS: dict[str, Any] = {}


def _kind(name: str) -> Any:
    if not _KINDS:
        from opentelemetry.trace import SpanKind

        _KINDS.update({"internal": SpanKind.INTERNAL, "server": SpanKind.SERVER,
                       "client": SpanKind.CLIENT, "producer": SpanKind.PRODUCER,
                       "consumer": SpanKind.CONSUMER})
    return _KINDS[name]


class Tracing:
    """Spans for wasmext, made by one OpenTelemetry TracerProvider."""

    def __init__(self, provider: Any, *, owned: bool = False) -> None:
        from opentelemetry import context, propagate, trace

        self.provider = provider
        self.tracer = provider.get_tracer("wasmext", __version__)
        self.owned = owned  # made here from settings: shut down with the host that made it
        self.exporter: Any = None  # the one exporter of a provider made here
        self._context, self._propagate, self._trace = context, propagate, trace

    @classmethod
    def from_settings(cls, settings: TracingSettings) -> Tracing:
        """A provider exporting as `settings` say (batched); ConfigError without the
        `otel` extra."""
        try:
            import opentelemetry.sdk.trace  # noqa: F401  (the extra is installed)
        except ImportError:
            raise _needs_otel() from None
        tracing = cls.with_exporter(_exporter(settings), settings, batch=True)
        tracing.owned = True
        return tracing

    @classmethod
    def with_exporter(cls, exporter: Any, settings: TracingSettings | None = None, *,
                      batch: bool = False) -> Tracing:
        """A provider sending every span to `exporter` (tests: an in-memory exporter,
        sent at once unless `batch`)."""
        try:
            from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
            from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        except ImportError:
            raise _needs_otel() from None
        settings = settings or TracingSettings(enabled=True)
        resource = {SERVICE_NAME: settings.service_name, SERVICE_VERSION: __version__}
        if settings.instance_id:
            resource["service.instance.id"] = clean(settings.instance_id, ATTR_CAP)
        provider = TracerProvider(
            resource=Resource.create(resource),
            sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
            shutdown_on_exit=False)  # the host's close does it, bounded (`shutdown`)
        provider.add_span_processor(BatchSpanProcessor(exporter) if batch
                                    else SimpleSpanProcessor(exporter))
        tracing = cls(provider)
        tracing.exporter = exporter
        return tracing

    # -- spans --------------------------------------------------------------------------

    @contextlib.contextmanager
    def span(self, name: str, attributes: Mapping[str, Any] | None = None, *,
             kind: Kind = "internal", parent: Any = None) -> Iterator[Any]:
        """A span current for the block: a child of `parent` (a Context) or else of the
        current span. An exception leaving the block marks it failed (cleaned)."""
        with self.tracer.start_as_current_span(
                name, context=parent, kind=_kind(kind), attributes=attributes,
                record_exception=False, set_status_on_exception=False) as span:
            try:
                yield span
            except BaseException as exc:
                self.failed(span, f"{type(exc).__name__}: {exc}")
                raise

    def start(self, name: str, attributes: Mapping[str, Any] | None = None, *,
              kind: Kind = "internal", parent: Any = None) -> Any:
        """A span that is not made current (ended by its owner: a session's)."""
        return self.tracer.start_span(name, context=parent, kind=_kind(kind),
                                      attributes=attributes, record_exception=False,
                                      set_status_on_exception=False)

    def context_of(self, span: Any) -> Any:
        """A Context whose current span is `span` (a parent for spans of other threads)."""
        return self._trace.set_span_in_context(span)

    def parent_for(self, session_context: Any) -> Any:
        """The parent of a hook call's span: the current span when it is in the session's
        trace (middleware next, a worker's request, the session's own block), else the
        session's span (an awaited call on a pool thread, where nothing is current)."""
        if session_context is None:
            return None
        current = self._trace.get_current_span()
        if current.is_recording() and current.get_span_context().trace_id == \
                self._trace.get_current_span(session_context).get_span_context().trace_id:
            return None
        return session_context

    def unsampled(self, parent: Any = None) -> bool:
        """Would a child of `parent` (a Context; None: the current span) be dropped? Its
        trace was not sampled: a hot path then makes no span at all, not even a
        non-recording one."""
        span_context = self._trace.get_current_span(parent).get_span_context()
        return bool(span_context.is_valid and not span_context.trace_flags.sampled)

    @contextlib.contextmanager
    def current(self, context: Any) -> Iterator[None]:
        """`context` current for the block (a session's span while its `with` runs)."""
        token = self._context.attach(context)
        try:
            yield
        finally:
            self._context.detach(token)

    def annotate(self, key: str, value: str | int | float | bool) -> None:
        """Set `key` on the current span (one its owner made further up the stack)."""
        self._trace.get_current_span().set_attribute(key, value)

    def failed(self, span: Any, message: str) -> None:
        """Mark `span` failed with `message`, cleaned and bounded."""
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, clean(message, STATUS_CAP)))

    # -- propagation (W3C traceparent and tracestate) -----------------------------------

    def inject(self, carrier: MutableMapping[str, str]) -> None:
        """Write the current span's `traceparent` (and `tracestate`) into `carrier`."""
        self._propagate.inject(carrier)

    def extract(self, carrier: Mapping[str, Any] | None) -> Any:
        """The Context a `traceparent` in `carrier` names (an empty one if none or bad).
        Only the two W3C keys are read, as strings of bounded length."""
        picked = {}
        for key in ("traceparent", "tracestate"):
            value = (carrier or {}).get(key)
            if isinstance(value, str) and len(value) <= 512:
                picked[key] = value
        if "tracestate" in picked and not _w3c_tracestate(picked["tracestate"]):
            # OpenTelemetry would drop it too, after logging the peer's member raw (an
            # escape sequence, a forged log line): dropped here, quietly.
            del picked["tracestate"]
        return self._propagate.extract(picked)

    def flush(self, timeout_s: float = 5.0) -> None:
        """Send the spans still batched."""
        flush = getattr(self.provider, "force_flush", None)
        if flush is not None:
            flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Send what is batched and stop the exporters of a provider made here; only
        flush one an embedder gave (it outlives the host)."""
        if not self.owned:
            self.flush()
            return
        # A reachable collector takes the last batch in milliseconds; one that is down
        # or hangs holds the process's exit for about 2 x CLOSE_FLUSH_S, not for the
        # exporter's retries and timeouts (the SDK's flush and shutdown ignore theirs:
        # they run on a daemon thread here, and the provider has no exit hook).
        closing = threading.Thread(target=self._close, name="wasmext-trace-close",
                                   daemon=True)
        closing.start()
        closing.join(CLOSE_FLUSH_S)
        if closing.is_alive() and self.exporter is not None:
            self.exporter.shutdown()  # ends the retries of the export still running
            closing.join(CLOSE_FLUSH_S)

    def _close(self) -> None:
        self.flush()
        self.provider.shutdown()


# A W3C tracestate member (key=value), as OpenTelemetry's own parser checks it.
_TRACESTATE_MEMBER = re.compile(
    r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
_TRACESTATE_MEMBERS = 32


def _w3c_tracestate(value: str) -> bool:
    """Whether a peer's tracestate is well formed: at most 32 valid members, no key twice."""
    keys = []
    for member in value.split(","):
        member = member.strip(" \t")
        if not member:
            continue
        if not _TRACESTATE_MEMBER.fullmatch(member):
            return False
        keys.append(member.split("=", 1)[0])
    return len(keys) <= _TRACESTATE_MEMBERS and len(set(keys)) == len(keys)


class _InertPeerText(logging.Filter):
    """OpenTelemetry's W3C parsers log a peer's malformed member raw (the MCP SDK runs them
    on every request's `_meta`, before wasmext sees it): one inert, bounded line."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's message cleaned; never drop it."""
        try:
            text = record.getMessage()
        except Exception:  # arguments that do not fit the format: the format alone
            text = str(record.msg)
        record.msg, record.args = clean(text, STATUS_CAP), ()
        return True


_PEER_TEXT_LOGGERS = ("opentelemetry.trace.span", "opentelemetry.trace.propagation.tracecontext",
                      "opentelemetry.baggage.propagation", "opentelemetry.baggage")
for _name in _PEER_TEXT_LOGGERS:
    logging.getLogger(_name).addFilter(_InertPeerText())


def activate(tracing: Tracing | None) -> Tracing | None:
    """Make `tracing` the process's (None: off); returns the one before."""
    global ACTIVE
    with _activating:
        before, ACTIVE = ACTIVE, tracing
    return before


def deactivate(tracing: Tracing) -> None:
    """Switch tracing off if `tracing` is still the process's, and shut it down."""
    global ACTIVE
    with _activating:
        if ACTIVE is tracing:
            ACTIVE = None
    tracing.shutdown()


def install(choice: TracingSettings | Tracing | None) -> Tracing | None:
    """What a host does with its tracing choice: a `Tracing` or enabled settings become
    the process's tracing (returned, for the host to deactivate on close); None or
    disabled settings change nothing."""
    if choice is None:
        return None
    tracing = choice if isinstance(choice, Tracing) else \
        (Tracing.from_settings(choice) if choice.enabled else None)
    if tracing is not None:
        activate(tracing)
    return tracing
