"""The bounded, sanitised log every plugin instance writes into.

Guest text is untrusted: control characters could forge log lines or drive a
terminal, and a loop could fill the disk. The values of sensitive settings are
replaced by `***`, then `wasmext.text.clean` escapes control and format
characters and cuts the line to a byte cap, and at most `max_lines` are kept,
before anything is stored or forwarded to Python logging.

One call may write at most `max_lines` lines (the innermost call-tree frame counts
them): a guest flooding its log (40 MB through WASI stdout in one call) would
otherwise pay the host for redacting, cleaning and logging every line. Past the
cap a line is counted in `capped` and dropped unread, a stream write only has its
newlines counted, and one warning line per call says the cap was reached.

`PluginLog.scrub` does the same (redact, then clean) for any other text the
guest wrote: its error code and message become a `PluginError` only through it,
so every later exit (the CLI, the exception, traces, fault records, MCP results,
JSON logs) carries redacted, inert, bounded text.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

from wasmext._abi import LOG_LEVELS
from wasmext.sandbox import calltree
from wasmext.text import CAP, clean

__all__ = ["LogLine", "PluginLog", "sanitize"]

_tree = calltree._tree  # the per-thread frame stack, read directly per line
_LEVEL_NAMES = {v: k for k, v in LOG_LEVELS.items()}
_PY_LEVELS = {"trace": 5, "debug": logging.DEBUG, "info": logging.INFO,
              "warn": logging.WARNING, "error": logging.ERROR}
REDACTED = "***"


def level_name(level: int | str) -> str:
    """Normalise an int or str level; anything unknown is `info`."""
    if isinstance(level, str):
        return level if level in LOG_LEVELS else "info"
    return _LEVEL_NAMES.get(level, "info")


def decode(raw: bytes, max_bytes: int) -> str:
    """Decode at most max_bytes of guest bytes (a cut character is dropped)."""
    return raw[:max_bytes].decode("utf-8", errors="ignore" if len(raw) > max_bytes else "replace")


def clean_bytes_capped(text: str, max_bytes: int) -> str:
    """`clean(text)` whose UTF-8 form is at most max_bytes (at least 32) long."""
    limit = max(max_bytes, 32)
    out = clean(text, limit)
    if len(out) <= max_bytes and out.isascii():  # one byte per character: no encoding
        return out
    while (excess := len(out.encode()) - max_bytes) > 0 and limit > 32:
        limit = max(32, limit - excess)
        out = clean(text, limit)
    return out


def sanitize(raw: bytes, max_bytes: int) -> str:
    """Decode, cut to max_bytes and escape control and format characters."""
    return clean_bytes_capped(decode(raw, max_bytes), max_bytes)


class LogLine(NamedTuple):
    """One line a plugin wrote, cleaned: when, level, where from, text."""

    # A NamedTuple, not a frozen dataclass: made once per guest log line, and a frozen
    # dataclass's `__init__` (one `object.__setattr__` per field) cost a quarter of a
    # `log` import call.

    time: float
    level: str
    source: str  # "log", "stdout" or "stderr"
    text: str


class PluginLog:
    """The last `max_lines` lines of one plugin, shared by its instances."""

    def __init__(self, plugin_id: str, max_lines: int, max_line_bytes: int,
                 secrets: Iterable[str] = ()) -> None:
        self.plugin_id = plugin_id
        self.max_line_bytes = max_line_bytes
        self.lines: deque[LogLine] = deque(maxlen=max_lines)
        self.dropped = 0  # lines pushed out of `lines` by newer ones
        self.capped = 0  # lines refused: their call had written `max_lines` already
        self.max_lines = max_lines
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._logger = logging.getLogger(f"wasmext.sandbox.plugin.{plugin_id}")

    def redact(self, text: str) -> str:
        """The text with the plugin's secret settings replaced."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def scrub(self, text: str, limit: int = CAP) -> str:
        """Guest text on its way into the host: secrets redacted, then `clean`ed
        (one inert line of at most `limit` characters)."""
        return clean(self.redact(text), limit)

    def over_cap(self, lines: int = 1) -> bool:
        """Whether the running call has used its line cap; if so `lines` more are
        counted as capped (O(1): nothing of them is read)."""
        stack = _tree.stack
        frame = stack[-1] if stack else None
        if frame is None or frame.logged < self.max_lines:
            return False
        if lines:
            self._refuse(frame, lines)
        return True

    def _refuse(self, frame: calltree.Frame, lines: int) -> None:
        self.capped += lines
        if frame.logged == self.max_lines:  # the call's first refused line: say so once
            frame.logged += 1
            self._store("warn", f"log cap reached: a call may write {self.max_lines} lines, "
                                "the rest of this call's are dropped (counted as capped)",
                        "log", frame)

    def append(self, level: int | str, raw: bytes, source: str = "log") -> None:
        """Store and log one guest line, unless its call is over the line cap."""
        stack = _tree.stack
        frame = stack[-1] if stack else None
        if frame is not None:
            if frame.logged >= self.max_lines:
                self._refuse(frame, 1)
                return
            frame.logged += 1
        name = level_name(level)
        text = clean_bytes_capped(self.redact(decode(raw, self.max_line_bytes)),
                                  self.max_line_bytes)
        self._store(name, text, source, frame)

    def _store(self, name: str, text: str, source: str,
               frame: calltree.Frame | None = None) -> None:
        if len(self.lines) == self.lines.maxlen:
            self.dropped += 1
        self.lines.append(LogLine(time.time(), name, source, text))
        level = _PY_LEVELS[name]
        if not self._logger.isEnabledFor(level):  # nobody listens: no record to build
            return
        extra = {"plugin_id": self.plugin_id, "source": source}
        # Written during a hook call: the call's session and hook, as the host set them
        # (`CallContext`), for the log record's context fields (observe.logs).
        ctx = getattr(frame.guest, "ctx", None) if frame is not None else None
        if ctx is not None and ctx.plugin_id == self.plugin_id:
            extra["session"], extra["hook"] = ctx.session, ctx.hook
        self._logger.log(level, "%s", text, extra=extra)

    def stream_writer(self, source: str) -> StreamCapture:
        """A writer for one WASI stream of an instance."""
        return StreamCapture(self, source)


class StreamCapture:
    """Collects a guest's WASI stdout/stderr writes into whole log lines."""

    def __init__(self, log: PluginLog, source: str) -> None:
        self._log = log
        self._source = source
        self._pending = b""

    def __call__(self, data: bytes) -> int:
        if self._log.over_cap(data.count(b"\n")):
            self._pending = b""
            return len(data)
        buf = self._pending + bytes(data)
        *complete, self._pending = buf.split(b"\n")
        for line in complete:
            self._log.append("info", line, self._source)
        if len(self._pending) > self._log.max_line_bytes:
            self._log.append("info", self._pending, self._source)
            self._pending = b""
        return len(data)
