"""Structured logs: JSON lines, and redaction of secret values before anything is written.

    secrets = SecretRegistry()
    secrets.add(api_token)
    handler = json_handler(sys.stderr, secrets)
    logging.getLogger("wasmext").addHandler(handler)
    log.info("called", extra={"plugin_id": "pii-mask", "session": "s1",
                              "hook": "on_plain_text", "outcome": "ok"})
    # {"ts":"2025-...Z","level":"info","logger":"wasmext","msg":"called",
    #  "plugin_id":"pii-mask","session":"s1","hook":"on_plain_text","outcome":"ok"}

`RedactingFilter` belongs on the *handler* (a logger's own filters do not see
records propagated from child loggers). It rewrites the record in place: the
message with its arguments merged, string `extra` fields (nested too), the
exception text and the stack, with every registered secret replaced by `***`.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys
import threading
from collections.abc import Callable, Iterable
from typing import IO, Any

__all__ = [
    "CONTEXT_FIELDS", "REDACTED", "JsonFormatter", "RedactingFilter", "SecretRegistry",
    "json_handler",
]

REDACTED = "***"
# Always present in a JSON line (null when the record does not carry them).
CONTEXT_FIELDS = ("plugin_id", "session", "hook", "outcome")
# A plugin's `trace` lines (sandbox.pluginlog), below DEBUG: named, not "level 5".
TRACE = 5
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message", "asctime", "taskName"}
_MAX_DEPTH = 8

SecretsProvider = Callable[[], Iterable[str]] | Iterable[str]


class SecretRegistry:
    """A thread-safe set of secret values; call it to get them (a secrets provider)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._values = {v for v in values if v}

    def add(self, value: str) -> None:
        """Add a secret to redact (empty values are ignored)."""
        if value:
            with self._lock:
                self._values.add(value)

    def discard(self, value: str) -> None:
        """Stop redacting a secret."""
        with self._lock:
            self._values.discard(value)

    def __call__(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._values)


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ISO 8601), level, logger, msg, the
    CONTEXT_FIELDS, every other `extra` field, and `exc` / `stack` when present.

    Non-ASCII and line separators are escaped, so one record is always one line.
    """

    def __init__(self, *, extras: bool = True) -> None:
        super().__init__()
        self.extras = extras

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON line, with the context fields always present."""
        stamp = datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
        doc: dict[str, Any] = {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": "trace" if record.levelno == TRACE else record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage()}
        extra = _extras(record)
        for name in CONTEXT_FIELDS:
            doc[name] = extra.pop(name, None)
        if self.extras:
            for key, value in extra.items():
                doc.setdefault(key, value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            doc["exc"] = record.exc_text
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, ensure_ascii=True, default=repr, separators=(",", ":"))


class RedactingFilter(logging.Filter):
    """Replace every secret the provider yields with `***` (longest first); never drops."""

    def __init__(self, secrets_provider: SecretsProvider) -> None:
        super().__init__()
        self._provider = secrets_provider
        self._cache: tuple[tuple[str, ...], re.Pattern[str] | None] = ((), None)

    def _pattern(self) -> re.Pattern[str] | None:
        provider = self._provider
        values = provider() if callable(provider) else provider
        key = tuple(sorted({v for v in values if isinstance(v, str) and v},
                           key=lambda v: (-len(v), v)))
        if key != self._cache[0]:
            self._cache = (key, re.compile("|".join(map(re.escape, key))) if key else None)
        return self._cache[1]

    def redact(self, text: str) -> str:
        """The text with every registered secret replaced."""
        pattern = self._pattern()
        return pattern.sub(REDACTED, text) if pattern is not None else text

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact the record's message, extras and traceback in place; always keep it."""
        pattern = self._pattern()
        if pattern is None:
            return True
        try:
            message = record.getMessage()
        except Exception:  # bad format arguments: keep what can be shown, redacted
            message = f"{record.msg!r} % {record.args!r}"
        record.msg, record.args = pattern.sub(REDACTED, message), None
        for key, value in _extras(record).items():
            setattr(record, key, _redact(pattern, value, 0))
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = pattern.sub(REDACTED, record.exc_text)
        if record.stack_info:
            record.stack_info = pattern.sub(REDACTED, record.stack_info)
        return True


def _redact(pattern: re.Pattern[str], value: Any, depth: int) -> Any:
    """Redact the strings inside an `extra` value; an object of another type becomes
    its redacted repr (a formatter would print that repr, secret included)."""
    if isinstance(value, str):
        return pattern.sub(REDACTED, value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if depth < _MAX_DEPTH and type(value) is dict:
        return {_redact(pattern, k, depth + 1): _redact(pattern, v, depth + 1)
                for k, v in value.items()}
    if depth < _MAX_DEPTH and type(value) in (list, tuple):
        return type(value)(_redact(pattern, v, depth + 1) for v in value)
    return pattern.sub(REDACTED, repr(value))


def json_handler(stream: IO[str] | None = None, secrets: SecretsProvider | None = None,
                 level: int = logging.NOTSET) -> logging.Handler:
    """A StreamHandler (stderr by default) writing JSON lines, redacting `secrets` if given."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.setLevel(level)
    if secrets is not None:
        handler.addFilter(RedactingFilter(secrets))
    return handler
