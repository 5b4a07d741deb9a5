"""The state store interface: scopes, limits, errors, reports and the export format.

A plugin's state is a set of entries `(plugin, session, key) -> value`, where
`session` is a session id or None for the plugin-global scope. Values are
opaque bytes (callers store MessagePack documents) and come back byte for byte.
Every backend implements `StateStore`; `wasmext.state.accounting` holds the
semantics they share (TTL, quotas, LRU eviction, transactions).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Protocol

import msgpack

from wasmext.errors import (
    CasConflict,
    InvalidArgument,
    InvalidKey,
    KeyTooLong,
    QuotaExceeded,
    SessionQuotaExceeded,
    StateError,
    StateForked,
    StateUnavailable,
    TooManyKeys,
    TransactionClosed,
)

__all__ = [
    "CasConflict", "CommitReport", "Eviction", "ExportFormat", "InvalidArgument", "InvalidKey",
    "KeyTooLong", "QuotaExceeded", "Record", "Scope", "ScopeName", "SessionQuotaExceeded",
    "StateError", "StateForked", "StateLimits", "StateStats", "StateStore",
    "StateTransaction", "StateUnavailable", "TooManyKeys", "TransactionClosed", "Usage",
    "dump_records", "load_records",
]

ScopeName = Literal["session", "plugin"]
ExportFormat = Literal["msgpack", "json"]
EXPORT_FORMAT = "wasmext-state"
EXPORT_VERSION = 1
MAX_ID_BYTES = 256


# -- values -----------------------------------------------------------------------------------

def check_id(what: str, value: object) -> str:
    """A plugin or session id: a non-empty str without NUL, at most MAX_ID_BYTES of UTF-8."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise InvalidArgument(f"{what} id must be a non-empty string without NUL, got {value!r}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(f"{what} id {value!r} is not valid UTF-8") from None
    if size > MAX_ID_BYTES:
        raise InvalidArgument(f"{what} id is {size} bytes, over {MAX_ID_BYTES}")
    return value


@dataclass(frozen=True)
class Scope:
    """Where an entry lives: a plugin's session (`session` set) or its global scope (None)."""

    plugin: str
    session: str | None = None

    def __post_init__(self) -> None:
        check_id("plugin", self.plugin)
        if self.session is not None:
            check_id("session", self.session)

    def __str__(self) -> str:
        where = f"session {self.session}" if self.session is not None else "global scope"
        return f"plugin {self.plugin} {where}"


@dataclass(frozen=True)
class StateLimits:
    """Quotas and TTLs, the same for every plugin of one store.

    An entry costs `len(key) + len(value) + entry_overhead_bytes` (UTF-8 bytes):
    the overhead bounds the number of entries a plugin can keep, however small.
    `max_plugin_bytes` is enforced by evicting the plugin's least-recently-used
    entries; the other limits reject the write.
    """

    ttl_seconds: float = 3600.0
    max_ttl_seconds: float = 30 * 86400.0
    max_plugin_bytes: int = 10 * 1024 * 1024
    max_session_bytes: int = 1024 * 1024
    session_warn_ratio: float = 0.8
    max_keys: int = 1000  # per scope (one plugin's session, or its global scope)
    max_key_bytes: int = 256
    entry_overhead_bytes: int = 64

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (type(value) is not int or value < 0):
                raise ValueError(f"state limit {f.name} must be an int >= 0, got {value!r}")
            if f.type == "float" and (not isinstance(value, (int, float))
                                      or isinstance(value, bool) or not math.isfinite(value)):
                raise ValueError(f"state limit {f.name} must be a finite number, got {value!r}")
        if not 0 < self.ttl_seconds <= self.max_ttl_seconds:
            raise ValueError("state limit ttl_seconds must be in (0, max_ttl_seconds]")
        if not 0 < self.session_warn_ratio <= 1:
            raise ValueError("state limit session_warn_ratio must be in (0, 1]")
        if self.max_key_bytes < 1 or self.max_keys < 1:
            raise ValueError("state limits max_key_bytes and max_keys must be at least 1")

    def replace(self, **changes: Any) -> StateLimits:
        """A copy with the given fields changed."""
        return dataclasses.replace(self, **changes)

    def entry_size(self, key: str, value: bytes) -> int:
        """Bytes an entry counts against the quotas: key, value and fixed overhead."""
        return len(key.encode("utf-8")) + len(value) + self.entry_overhead_bytes


@dataclass(frozen=True)
class Record:
    """One exported entry; `expires_at` is a Unix time, `ttl` the refresh period."""

    plugin: str
    session: str | None
    key: str
    value: bytes
    expires_at: float
    ttl: float | None = None


@dataclass(frozen=True)
class Eviction:
    """One entry evicted to make room: whose, which key, how large."""

    plugin: str
    session: str | None
    key: str
    size: int


@dataclass(frozen=True)
class CommitReport:
    """What a commit did besides the writes asked for: evictions and quota warnings;
    `duplicate`: nothing was applied, a commit under the same idempotency key had been."""

    evicted: tuple[Eviction, ...] = ()
    warnings: tuple[str, ...] = ()
    duplicate: bool = False


@dataclass(frozen=True)
class Usage:
    """Accounted bytes of a plugin, and bytes and keys of one of its scopes."""

    plugin_bytes: int
    scope_bytes: int
    scope_keys: int


@dataclass
class StateStats:
    """Counters since the store was opened (this process only)."""

    commits: int = 0
    rejected: int = 0
    conflicts: int = 0
    evictions: int = 0
    evicted_bytes: int = 0
    warnings: int = 0
    evictions_by_plugin: dict[str, int] = dataclasses.field(default_factory=dict)


# -- the interface ----------------------------------------------------------------------------

class StateTransaction(Protocol):
    """The state writes of one plugin call (`StateStore.begin`), applied all or nothing."""

    @property
    def closed(self) -> bool:
        """True once committed or rolled back."""

    @property
    def pending(self) -> int:
        """How many keys and scopes this transaction would change."""

    def get(self, key: str, *, scope: ScopeName = "session") -> bytes | None:
        """The value as this transaction sees it (its own writes included)."""

    def set(self, key: str, value: bytes, *, scope: ScopeName = "session",
            ttl: float | None = None) -> None:
        """Stage a write, checked against the quotas now and again at commit."""

    def delete(self, key: str, *, scope: ScopeName = "session") -> bool:
        """Stage a delete; True if the key exists as this transaction sees it."""

    def keys(self, *, scope: ScopeName = "session", prefix: str = "") -> list[str]:
        """Live keys of the scope as this transaction sees them, sorted."""

    def clear(self, *, scope: ScopeName = "session") -> int:
        """Stage deleting every key of the scope; how many there were."""

    def cas(self, key: str, expected: bytes | None, new: bytes | None, *,
            scope: ScopeName = "session", ttl: float | None = None) -> None:
        """Stage `new` only if the value is `expected`; checked again at commit."""

    def once(self, key: str, ttl: float) -> None:
        """Apply the commit at most once per idempotency `key` within `ttl` seconds."""

    def commit(self) -> CommitReport:
        """Apply every staged change atomically."""

    def rollback(self) -> None:
        """Discard every staged change."""


class StateStore(ABC):
    """One backend holding the state of every plugin. Thread-safe; close() when done."""

    limits: StateLimits
    # True when nothing outside this process can reach the store's data (the memory
    # backend): a count kept beside it in this process is then the whole truth.
    process_local: bool = False

    @abstractmethod
    def begin(self, plugin_id: str, session_id: str | None = None) -> StateTransaction:
        """A transaction of one plugin call: nothing is visible to others until commit()."""

    @abstractmethod
    def get(self, scope: Scope, key: str) -> bytes | None:
        """The live value (refreshing its TTL), or None."""

    @abstractmethod
    def set(self, scope: Scope, key: str, value: bytes, *,
            ttl: float | None = None) -> CommitReport:
        """Write the value with its TTL (default: the limits' ttl_seconds) in one transaction."""
        ...

    @abstractmethod
    def delete(self, scope: Scope, key: str) -> bool:
        """True if the key existed."""

    @abstractmethod
    def keys(self, scope: Scope, prefix: str = "") -> list[str]:
        """Live keys of the scope, sorted."""

    @abstractmethod
    def clear(self, scope: Scope) -> int:
        """Delete every key of the scope; the number deleted."""

    @abstractmethod
    def cas(self, scope: Scope, key: str, expected: bytes | None, new: bytes | None, *,
            ttl: float | None = None) -> CommitReport:
        """Write `new` (None: delete) only if the value is `expected` (None: absent)."""

    @abstractmethod
    def end_session(self, session_id: str, plugin_id: str | None = None) -> int:
        """Delete the session's state (of one plugin, or of all); the number of entries."""

    @abstractmethod
    def drop_plugin(self, plugin_id: str) -> int:
        """Delete all state of a plugin, every scope; the number of entries."""

    @abstractmethod
    def purge_expired(self) -> int:
        """Delete every expired entry now (reads never return them anyway)."""

    @abstractmethod
    def usage(self, scope: Scope) -> Usage:
        """Bytes the plugin holds in all, and bytes and keys in this scope."""
        ...

    @abstractmethod
    def stats(self) -> StateStats:
        """A snapshot of the store's counters (commits, evictions, ...)."""
        ...

    @abstractmethod
    def records(self) -> list[Record]:
        """Every live entry, ordered by plugin, session, key."""

    @abstractmethod
    def load(self, records: Iterable[Record], *, replace: bool = False) -> int:
        """Write records as one atomic unit (quotas apply per plugin; if one plugin's
        records are refused, nothing changes); `replace` empties the plugins the records
        name first (others are left alone). After a crash at any moment every plugin holds
        all of its old state or all of the imported state. Expired records are skipped.
        The number written."""

    @abstractmethod
    def close(self) -> None:
        """Release the store's connection or file."""
        ...

    def export_state(self, fmt: ExportFormat = "msgpack") -> bytes:
        """Every live entry, serialised in the given format."""
        return dump_records(self.records(), fmt)

    def import_state(self, data: bytes, fmt: ExportFormat = "msgpack", *,
                     replace: bool = False) -> int:
        """Load entries exported by export_state; the number written."""
        return self.load(load_records(data, fmt), replace=replace)

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


# -- the export format ------------------------------------------------------------------------

def dump_records(records: Iterable[Record], fmt: ExportFormat = "msgpack") -> bytes:
    """`{"format": "wasmext-state", "version": 1, "records": [...]}` as MessagePack or JSON.

    Each record is `{plugin, session, key, value, expires_at, ttl}`; `value` is
    bin in MessagePack and base64 text in JSON.
    """
    items = []
    for r in records:
        value: bytes | str = r.value
        if fmt == "json":
            value = base64.b64encode(r.value).decode("ascii")
        items.append({"plugin": r.plugin, "session": r.session, "key": r.key, "value": value,
                      "expires_at": r.expires_at, "ttl": r.ttl})
    doc = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "records": items}
    if fmt == "json":
        return json.dumps(doc, indent=1, ensure_ascii=False).encode("utf-8") + b"\n"
    if fmt == "msgpack":
        return msgpack.packb(doc, use_bin_type=True)  # type: ignore[no-any-return]
    raise ValueError(f"unknown state export format {fmt!r}; use 'msgpack' or 'json'")


def load_records(data: bytes, fmt: ExportFormat = "msgpack") -> list[Record]:
    """Parse `dump_records` output (or a bare list of records); InvalidArgument if malformed."""
    try:
        if fmt == "json":
            doc = json.loads(data)
        elif fmt == "msgpack":
            doc = msgpack.unpackb(data, raw=False, strict_map_key=True)
        else:
            raise ValueError(f"unknown state export format {fmt!r}; use 'msgpack' or 'json'")
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise InvalidArgument(f"not a state export ({fmt}): {exc}") from exc
    if isinstance(doc, Mapping):
        if doc.get("format") != EXPORT_FORMAT or doc.get("version") != EXPORT_VERSION:
            raise InvalidArgument(f"not a {EXPORT_FORMAT} version {EXPORT_VERSION} document")
        doc = doc.get("records")
    if not isinstance(doc, list):
        raise InvalidArgument("a state export holds a list of records")
    return [_record(item, fmt, i) for i, item in enumerate(doc)]


def _record(item: Any, fmt: str, index: int) -> Record:
    def bad(why: str) -> InvalidArgument:
        return InvalidArgument(f"state record {index}: {why}")

    if not isinstance(item, Mapping):
        raise bad("not a map")
    value = item.get("value")
    if fmt == "json" and isinstance(value, str):
        try:
            value = base64.b64decode(value, validate=True)
        except ValueError:
            raise bad("value is not base64") from None
    if not isinstance(value, bytes):
        raise bad("value must be bytes (base64 in JSON)")
    expires, ttl = item.get("expires_at"), item.get("ttl")
    if not isinstance(expires, (int, float)) or isinstance(expires, bool):
        raise bad("expires_at must be a number")
    if ttl is not None and (not isinstance(ttl, (int, float)) or isinstance(ttl, bool)):
        raise bad("ttl must be a number or null")
    plugin, session, key = item.get("plugin"), item.get("session"), item.get("key")
    if not isinstance(plugin, str) or not isinstance(key, str):
        raise bad("plugin and key must be strings")
    if session is not None and not isinstance(session, str):
        raise bad("session must be a string or null")
    return Record(plugin, session, key, value, float(expires),
                  None if ttl is None else float(ttl))
