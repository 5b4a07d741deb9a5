"""The SQLite backend: the embedded default, one WAL-mode file under the data directory.

Every commit is in a `BEGIN IMMEDIATE` transaction with `synchronous=FULL`, so a
commit that returned survives a killed process (and a power loss). Commits of
concurrent calls share a transaction and its fsync (group commit): whoever gets
the store's lock commits everything queued, each call's changes in a savepoint. Usage
counters live in the same file and change in the same transaction as the
entries, so they can never disagree after a crash. Several processes may open
the same file (the command line while a host runs); writers take turns.

A forked child never uses the connection it inherited (SQLite's file locks belong to
the process that took them: the child's commits would hold none, and the parent's
close could delete the WAL they went to). A fork waits for the operation in flight
(at most `FORK_WAIT_S`); the child closes the inherited connection, idle then, at
once (before any store of the child opens a connection to the same file: SQLite
shares its lock bookkeeping between a process's connections to one file), and its
first operation opens its own. A child forked while an operation was still running
is refused at once (`StateForked`): half of a transaction is not the child's to
finish or to roll back.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wasmext.forks import quiesce_at_fork
from wasmext.state.accounting import Changes, Plan, Ref, Sid, plan
from wasmext.state.base import Record, StateError, StateForked, StateLimits, StateUnavailable
from wasmext.state.deadline import current, remaining
from wasmext.state.engine import Engine, LockedAcrossFork

__all__ = ["DEFAULT_FILENAME", "SQLiteStore"]

DEFAULT_FILENAME = "state.db"
SCHEMA_VERSION = 1
GLOBAL = ""  # the plugin-global scope's session column (session ids are never empty)
# Connections a forked child inherited mid-operation: closing one would roll back, in
# memory the parent shares, a transaction the parent may still commit. Never released.
_ABANDONED: list[sqlite3.Connection] = []

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    plugin TEXT NOT NULL, session TEXT NOT NULL, key TEXT NOT NULL,
    value BLOB NOT NULL, size INTEGER NOT NULL, ttl REAL NOT NULL,
    expires_at REAL NOT NULL, tick INTEGER NOT NULL,
    PRIMARY KEY (plugin, session, key)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_expiry ON entries (plugin, expires_at);
CREATE INDEX IF NOT EXISTS entries_lru ON entries (plugin, tick);
CREATE TABLE IF NOT EXISTS usage (
    plugin TEXT NOT NULL, session TEXT NOT NULL, bytes INTEGER NOT NULL, keys INTEGER NOT NULL,
    PRIMARY KEY (plugin, session)) WITHOUT ROWID;
"""


def _col(sid: Sid) -> str:
    return GLOBAL if sid is None else sid


def _sid(col: str) -> Sid:
    return None if col == GLOBAL else col


class _SQLiteView:
    def __init__(self, conn: sqlite3.Connection, plugin: str) -> None:
        self._conn = conn
        self._plugin = plugin

    def plugin_bytes(self) -> int:
        row = self._conn.execute("SELECT COALESCE(SUM(bytes), 0) FROM usage WHERE plugin = ?",
                                 (self._plugin,)).fetchone()
        return int(row[0])

    def scope_usage(self, sids: Iterable[Sid]) -> dict[Sid, tuple[int, int]]:
        out: dict[Sid, tuple[int, int]] = {}
        for sid in sids:
            row = self._conn.execute("SELECT bytes, keys FROM usage WHERE plugin = ? AND"
                                     " session = ?", (self._plugin, _col(sid))).fetchone()
            out[sid] = (0, 0) if row is None else (int(row[0]), int(row[1]))
        return out

    def _column(self, column: str, refs: Iterable[Ref]) -> dict[Ref, Any]:
        out: dict[Ref, Any] = {}
        for sid, key in refs:
            row = self._conn.execute(f"SELECT {column} FROM entries WHERE plugin = ? AND"
                                     " session = ? AND key = ?",
                                     (self._plugin, _col(sid), key)).fetchone()
            if row is not None:
                out[(sid, key)] = row[0]
        return out

    def sizes(self, refs: Iterable[Ref]) -> dict[Ref, int]:
        return {ref: int(v) for ref, v in self._column("size", refs).items()}

    def values(self, refs: Iterable[Ref]) -> dict[Ref, bytes]:
        return {ref: bytes(v) for ref, v in self._column("value", refs).items()}

    def scope_sizes(self, sid: Sid) -> dict[str, int]:
        rows = self._conn.execute("SELECT key, size FROM entries WHERE plugin = ? AND"
                                  " session = ?", (self._plugin, _col(sid)))
        return {str(k): int(s) for k, s in rows}

    def lru(self) -> Iterator[tuple[Ref, int]]:
        rows = self._conn.execute("SELECT session, key, size FROM entries WHERE plugin = ?"
                                  " ORDER BY tick", (self._plugin,))
        for session, key, size in rows:
            yield (_sid(session), key), int(size)


class _Pending:
    """One queued commit and, once its transaction ended, its outcome."""

    __slots__ = ("changes", "deadline", "done", "now", "result")

    def __init__(self, changes: Changes, now: float) -> None:
        self.changes, self.now = changes, now
        self.deadline = current()  # its caller's; past it, no transaction may apply it
        self.done = threading.Event()
        self.result: Plan | BaseException | None = None


class SQLiteStore(LockedAcrossFork, Engine):
    """State in one SQLite file (WAL). `durable=False` trades power-loss safety for speed;
    commits then still survive a killed process."""

    def __init__(self, path: str | Path, limits: StateLimits | None = None, *,
                 clock: Callable[[], float] = time.time, durable: bool = True,
                 busy_timeout: float = 10.0) -> None:
        super().__init__(limits, clock=clock)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._sync = "FULL" if durable else "NORMAL"
        self._lock = threading.RLock()
        self._busy = busy_timeout
        self._busy_ms = -1
        self._queue: list[_Pending] = []  # commits waiting for the next transaction
        self._queue_lock = threading.Lock()
        self._quiet_at_fork = False  # this process's fork found no operation in flight
        # In a forked child until its first op: "reopen" (the inherited connection
        # closed, the child's own not open yet) or "busy" (refused).
        self._inherited = ""
        self._closed = False
        try:
            self._conn = self._connect()
            with self._write():
                for stmt in _SCHEMA.split(";"):
                    if stmt.strip():
                        self._conn.execute(stmt)
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            row = self._conn.execute("SELECT MAX(tick) FROM entries").fetchone()
            self._ticker.seen(int(row[0] or 0))
        except sqlite3.Error as exc:
            raise StateUnavailable(f"cannot open the state file {self.path}: {exc}") from exc

        quiesce_at_fork(self)

    def _connect(self) -> sqlite3.Connection:
        # Opened by a call's first state op, it waits no longer than the call may (a
        # file another process holds locked kept the call busy_timeout seconds).
        conn = sqlite3.connect(self.path, timeout=remaining(self._busy),
                               isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._sync}")
        self._busy_ms = -1
        return conn

    def _after_fork(self) -> None:
        """In a forked child: the parent's threads, their queued commits and their hold on
        the lock are not here; the connection is the parent's (replaced at first use)."""
        super()._after_fork()
        quiet, self._quiet_at_fork = self._quiet_at_fork, False
        self._lock = threading.RLock()
        self._queue_lock = threading.Lock()
        self._queue = []
        if self._closed:  # stays closed
            return
        if not quiet:
            _ABANDONED.append(self._conn)
            self._inherited = "busy"
            return
        # Idle, so its close neither rolls back nor checkpoints: the parent's connection
        # keeps a lock the close cannot take (or, the parent gone, the child is the last
        # user and the checkpoint is its to make).
        try:
            self._conn.close()
        except sqlite3.Error:
            _ABANDONED.append(self._conn)
        self._inherited = "reopen"

    def _own_connection(self) -> None:
        """A forked child's first operation: the child's own connection (its file locks
        its own), or StateForked when the parent's was mid-operation at the fork."""
        if self._inherited == "busy":
            raise StateForked(f"state file {self.path}: this process was forked while another"
                              " thread was using the state store; its connection can be"
                              " neither used nor replaced here: fork while no call uses"
                              " state, or open the host after the fork")
        self._conn = self._connect()
        self._inherited = ""

    @classmethod
    def in_data_dir(cls, data_dir: str | Path, limits: StateLimits | None = None, *,
                    clock: Callable[[], float] = time.time) -> SQLiteStore:
        """The store of a host whose data directory is `data_dir` (data_dir/state.db)."""
        return cls(Path(data_dir) / DEFAULT_FILENAME, limits, clock=clock)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """This store's lock, then SQLite's busy wait, both within the call's deadline."""
        if not self._lock.acquire(timeout=remaining(self._busy)):
            raise StateUnavailable(f"state file {self.path}: no turn before the call's deadline")
        try:
            if self._inherited:
                self._own_connection()
            ms = max(1, int(remaining(self._busy) * 1000))
            if ms != self._busy_ms:
                self._conn.execute(f"PRAGMA busy_timeout = {ms}")
                self._busy_ms = ms
            yield
        except sqlite3.OperationalError as exc:  # locked, busy, disk I/O: the host's trouble
            raise StateUnavailable(f"state file {self.path}: {exc}") from exc
        finally:
            self._lock.release()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._locked():
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StateUnavailable(f"state file {self.path} is busy: {exc}") from exc
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise StateUnavailable(f"cannot commit to {self.path}: {exc}") from exc

    def _read(self, plugin: str, sid: Sid, key: str, now: float) -> bytes | None:
        with self._locked():
            row = self._conn.execute("SELECT value FROM entries WHERE plugin = ? AND session = ?"
                                     " AND key = ? AND expires_at > ?",
                                     (plugin, _col(sid), key, now)).fetchone()
        return None if row is None else bytes(row[0])

    def _keys(self, plugin: str, sid: Sid, now: float) -> list[str]:
        with self._locked():
            rows = self._conn.execute("SELECT key FROM entries WHERE plugin = ? AND session = ?"
                                      " AND expires_at > ? ORDER BY key",
                                      (plugin, _col(sid), now)).fetchall()
        return sorted(str(r[0]) for r in rows)

    def _touch(self, plugin: str, refs: list[Ref], now: float) -> None:
        # A refresh lost to a power cut is harmless: skip the fsync for touch-only commits.
        with self._locked():
            self._conn.execute("PRAGMA synchronous=NORMAL")
            try:
                with self._write() as conn:
                    tick = self._ticker.take(len(refs), now)
                    conn.executemany(
                        "UPDATE entries SET expires_at = ? + ttl, tick = ? WHERE plugin = ?"
                        " AND session = ? AND key = ? AND expires_at > ?",
                        [(now, tick + i, plugin, _col(s), k, now)
                         for i, (s, k) in enumerate(refs)])
            finally:
                self._conn.execute(f"PRAGMA synchronous={self._sync}")

    @contextmanager
    def _view(self, plugin: str) -> Iterator[_SQLiteView]:
        with self._locked():
            yield _SQLiteView(self._conn, plugin)

    def _commit(self, changes: Changes, now: float) -> Plan:
        """Group commit: the caller queues its changes; whoever holds the store's lock
        next commits everything queued in one transaction (one fsync), each change in
        its own savepoint. A commit returns only after its transaction is durable."""
        item = _Pending(changes, now)
        with self._queue_lock:
            self._queue.append(item)
        try:
            self._lead()
        except StateUnavailable:
            with self._queue_lock:
                if item in self._queue:  # no transaction took it: it never happened
                    self._queue.remove(item)
                    raise
        item.done.wait()  # taken by a transaction that is running now
        if isinstance(item.result, BaseException):
            raise item.result
        assert item.result is not None
        return item.result

    def _lead(self) -> None:
        with self._locked():
            with self._queue_lock:
                batch, self._queue = self._queue, []
            if not batch:
                return
            try:
                with self._write() as conn:
                    for it in batch:
                        if it.deadline is not None and time.monotonic() >= it.deadline:
                            # Its caller gave up while another transaction ran: it was
                            # told the call failed, so the change must not land now.
                            it.result = StateUnavailable(
                                f"plugin {it.changes.plugin}: the commit was refused: the"
                                " call's deadline passed while it waited for its turn"
                                " (nothing written)", plugin_id=it.changes.plugin)
                            continue
                        conn.execute("SAVEPOINT one")
                        try:
                            it.result = self._apply(conn, it.changes, it.now)
                        except StateError as exc:  # a conflict or a quota: this change only
                            conn.execute("ROLLBACK TO one")
                            it.result = exc
                        conn.execute("RELEASE one")
            except StateUnavailable as exc:  # the transaction failed: none of them happened
                for it in batch:
                    it.result = StateUnavailable(exc.message, plugin_id=it.changes.plugin)
                    it.result.__cause__ = exc
            except BaseException as exc:
                for it in batch:
                    it.result = exc
            finally:
                for it in batch:
                    it.done.set()

    def _apply(self, conn: sqlite3.Connection, changes: Changes, now: float) -> Plan:
        p = changes.plugin
        self._purge_in(conn, now, p)
        done = plan(_SQLiteView(conn, p), changes, now, self.limits)
        conn.executemany("DELETE FROM entries WHERE plugin = ? AND session = ? AND key = ?",
                         [(p, _col(s), k) for s, k in done.deletes])
        tick = self._ticker.take(len(done.puts), now)
        conn.executemany(
            "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(p, _col(u.sid), u.key, u.value, u.size, u.ttl, u.expires_at, tick + i)
             for i, u in enumerate(done.puts)])
        self._add_usage(conn, [(p, _col(s), b, n) for s, (b, n) in done.deltas.items()])
        return done

    @staticmethod
    def _add_usage(conn: sqlite3.Connection, deltas: list[tuple[str, str, int, int]]) -> None:
        conn.executemany(
            "INSERT INTO usage VALUES (?, ?, ?, ?) ON CONFLICT (plugin, session) DO UPDATE"
            " SET bytes = bytes + excluded.bytes, keys = keys + excluded.keys", deltas)
        conn.executemany("DELETE FROM usage WHERE plugin = ? AND session = ? AND keys <= 0",
                         [(d[0], d[1]) for d in deltas])

    def _purge_in(self, conn: sqlite3.Connection, now: float, plugin: str | None) -> int:
        # Every commit purges its plugin first: the probe and the sum walk the expiry
        # index, so a commit costs the same at 100 keys as at a million. (Left to itself
        # the planner groups through the primary key and reads every row of the plugin.)
        args: tuple[str | float, ...]
        if plugin is not None:
            where, args = "plugin = ? AND expires_at <= ?", (plugin, now)
            if conn.execute("SELECT 1 FROM entries WHERE plugin = ? AND expires_at <= ?"
                            " LIMIT 1", args).fetchone() is None:
                return 0
            source = "entries INDEXED BY entries_expiry"
        else:
            where, args, source = "expires_at <= ?", (now,), "entries"
        gone = conn.execute(f"SELECT plugin, session, -SUM(size), -COUNT(*) FROM {source}"
                            f" WHERE {where} GROUP BY plugin, session", args).fetchall()
        if not gone:
            return 0
        conn.execute(f"DELETE FROM entries WHERE {where}", args)
        self._add_usage(conn, [(str(a), str(b), int(c), int(d)) for a, b, c, d in gone])
        return -sum(int(row[3]) for row in gone)

    def _purge(self, now: float, plugin: str | None) -> int:
        with self._locked():
            where, args = ("plugin = ? AND", (plugin, now)) if plugin is not None else ("", (now,))
            if self._conn.execute(f"SELECT 1 FROM entries WHERE {where} expires_at <= ? LIMIT 1",
                                  args).fetchone() is None:
                return 0
            with self._write() as conn:
                return self._purge_in(conn, now, plugin)

    def _plugins(self) -> list[str]:
        with self._locked():
            return [str(r[0]) for r in
                    self._conn.execute("SELECT DISTINCT plugin FROM usage ORDER BY plugin")]

    def _drop_plugin(self, plugin: str) -> int:
        with self._write() as conn:
            count = conn.execute("DELETE FROM entries WHERE plugin = ?", (plugin,)).rowcount
            conn.execute("DELETE FROM usage WHERE plugin = ?", (plugin,))
            return int(count)

    def _records(self, now: float) -> list[Record]:
        with self._locked():
            rows = self._conn.execute("SELECT plugin, session, key, value, expires_at, ttl"
                                      " FROM entries WHERE expires_at > ?", (now,)).fetchall()
        return [Record(str(p), _sid(s), str(k), bytes(v), float(e), float(t))
                for p, s, k, v, e, t in rows]

    def _import(self, batches: dict[str, Changes], replace: bool, now: float) -> None:
        # One BEGIN IMMEDIATE for the whole import: a kill anywhere rolls all of it back.
        with self._write() as conn:
            for p, ch in batches.items():
                if replace:
                    conn.execute("DELETE FROM entries WHERE plugin = ?", (p,))
                    conn.execute("DELETE FROM usage WHERE plugin = ?", (p,))
                self._apply(conn, ch, now)  # purges, plans and writes, as a commit does

    def close(self) -> None:
        """Close the connection (in a forked child, the one it opened; never the one
        inherited mid-operation)."""
        with self._lock:
            if self._inherited != "busy":  # else abandoned: ops stay refused
                self._conn.close()
                self._inherited = ""
            self._closed = True
