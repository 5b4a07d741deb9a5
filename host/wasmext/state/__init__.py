"""Plugin state: per plugin and session, with TTLs, quotas, LRU eviction and transactions.

    from wasmext.state import SQLiteStore, Scope

    store = SQLiteStore.in_data_dir(".wasmext")
    with store.begin("my-plugin", "session-1") as txn:   # one plugin call
        txn.set("greeting", msgpack.packb("hi"))          # committed when the block ends
    store.get(Scope("my-plugin", "session-1"), "greeting")

Backends: `MemoryStore` (tests), `SQLiteStore` (the embedded default; sqlite3 on first use),
`RedisStore` (several hosts; imported lazily, it needs the `redis` package),
`JetStreamStore` (several hosts of a NATS cluster; lazily, it needs nats-py).
See docs/state.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wasmext.state.base import (
    CasConflict,
    CommitReport,
    Eviction,
    ExportFormat,
    InvalidArgument,
    InvalidKey,
    KeyTooLong,
    QuotaExceeded,
    Record,
    Scope,
    ScopeName,
    SessionQuotaExceeded,
    StateError,
    StateForked,
    StateLimits,
    StateStats,
    StateStore,
    StateTransaction,
    StateUnavailable,
    TooManyKeys,
    TransactionClosed,
    Usage,
    dump_records,
    load_records,
)
from wasmext.state.engine import Engine, Transaction
from wasmext.state.memory import MemoryStore

if TYPE_CHECKING:
    from wasmext.state.jetstream.store import JetStreamStore
    from wasmext.state.redis.store import RedisStore
    from wasmext.state.sqlite import SQLiteStore

__all__ = [
    "CasConflict",
    "CommitReport",
    "Engine",
    "Eviction",
    "ExportFormat",
    "InvalidArgument",
    "InvalidKey",
    "JetStreamStore",
    "KeyTooLong",
    "MemoryStore",
    "QuotaExceeded",
    "Record",
    "RedisStore",
    "SQLiteStore",
    "Scope",
    "ScopeName",
    "SessionQuotaExceeded",
    "StateError",
    "StateForked",
    "StateLimits",
    "StateStats",
    "StateStore",
    "StateTransaction",
    "StateUnavailable",
    "TooManyKeys",
    "Transaction",
    "TransactionClosed",
    "Usage",
    "dump_records",
    "load_records",
]


def __getattr__(name: str) -> Any:
    if name == "SQLiteStore":  # sqlite3 with the first store that opens a file
        from wasmext.state.sqlite import SQLiteStore

        return SQLiteStore
    if name == "RedisStore":
        from wasmext.state.redis.store import RedisStore

        return RedisStore
    if name == "JetStreamStore":
        from wasmext.state.jetstream.store import JetStreamStore

        return JetStreamStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
