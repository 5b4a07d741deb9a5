"""The JetStream backend: state shared by every host of a NATS cluster, no Redis needed.

The layout (a MessagePack document per scope, one accounting document per
plugin) is in `documents`.

A commit is optimistic, like Redis's: read the plugin's accounting and the scopes
the changes touch (concurrently), drop their expired entries, `plan`, and write
every changed document and the accounting in ONE atomic batch (JetStream's
ADR-50 batch publish) whose every message expects the revision that was read.
A batch whose expectation failed (another host committed to this plugin in
between) changes nothing, and the commit is planned again; a compare-and-set
whose value changed meanwhile then fails with CasConflict. An import is one
batch over every plugin it names, so it too is all or nothing. Eviction and the
export read all of a plugin's scopes; a commit reads only the scopes it touches
and those whose earliest expiry has passed.

Why scope documents, measured (`benchmarks/run.py --state-only`, two runs,
loopback nats-server 2.15 with file storage, a loaded 2-core machine;
docs/state.md has the table), p50 of one hook call:
- Every commit writes at least two keys (an entry's scope and the accounting),
  so it needs an atomic batch whatever the layout, and the batch dominates: the
  server syncs it to disk (two fsyncs) before acking. An atomic batch of two
  100 B messages took 8.0-11.0 ms against 0.22-0.26 ms for a plain KV put
  (which is neither atomic across keys nor synced); a committed `state.set`
  12.8-18.0 ms, 1.6x its batch floor in both runs (Redis 0.60-0.83 ms, SQLite
  3.9-4.0 ms). One key per entry would not make the batch cheaper and would
  need an index per plugin (for `keys`, expiry and LRU order) rewritten by
  every commit: a scope map carries its own index.
- The price of the layout: a set into a session of 1000 keys rewrites its
  ~130 KB document: 1.1-1.75x the 1-key session (Redis 1.0-1.3x, the noise). A
  document is bounded by `max_keys` and `max_session_bytes`, and must fit the
  server's `max_payload` (1 MiB by default): a commit that would exceed it is
  refused with QuotaExceeded naming that limit.
- A `state.get` (0.89-1.02 ms; Redis 0.19-0.26 ms) is one direct get (the first of
  its scope in a transaction; later ones reuse the document), and at
  commit one revision-checked put of the scope that refreshes TTL and LRU
  recency (not synced: a refresh lost to a crash is harmless).
- Every commit of a plugin rewrites its accounting document, so concurrent
  commits of one plugin fail each other's revision checks: eight threads of one
  process managed 11.7 writes/s (p99 3.3 s). Grouping them (`_commit`: one
  read, one batch for everything queued) made it 61 writes/s (p99 0.45 s;
  `benchmarks/bench_durable.py`); across processes they still take turns.

Every wait is bounded by the calling hook's deadline (`connection`).
"""

from __future__ import annotations

import binascii
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from wasmext.state.accounting import Changes, Plan, Ref, Sid, plan
from wasmext.state.base import (
    CasConflict,
    QuotaExceeded,
    Record,
    StateError,
    StateLimits,
    StateUnavailable,
)
from wasmext.state.deadline import current, remaining
from wasmext.state.engine import Engine
from wasmext.state.jetstream.connection import Bucket, Write
from wasmext.state.jetstream.documents import (
    DocsView,
    Entry,
    LazyDocsView,
    PluginDocs,
    changed_sids,
    pack,
    scope_doc,
    scope_token,
    token,
    untoken,
)

__all__ = ["DEFAULT_BUCKET", "JetStreamStore"]

DEFAULT_BUCKET = "wasmext_state"
_TOUCH_RETRIES = 3
_SEEN_DOCS = 8  # scope documents a thread remembers for the TTL refresh of its reads


class _Pending:
    """One queued commit, what its dry run read, and (once its batch ended) its outcome."""

    __slots__ = ("changes", "deadline", "done", "kept", "now", "result")

    def __init__(self, changes: Changes, now: float, kept: PluginDocs | None) -> None:
        self.changes, self.now, self.kept = changes, now, kept
        self.deadline = current()  # its caller's; past it, no batch may carry it
        self.done = threading.Event()
        self.result: Plan | BaseException | None = None


class _Group:
    """The commits of one plugin waiting for their turn, and the turn."""

    def __init__(self) -> None:
        self.turn = threading.Lock()
        self.queue_lock = threading.Lock()
        self.queue: list[_Pending] = []


class JetStreamStore(Engine):
    """State in a JetStream key-value bucket, shared by every host using the same bucket."""

    def __init__(self, url: str = "nats://127.0.0.1:4222", limits: StateLimits | None = None,
                 *, bucket: str = DEFAULT_BUCKET, options: Mapping[str, Any] | None = None,
                 secrets: Sequence[str] = (), timeout: float = 5.0, replicas: int = 1,
                 storage: str = "file", clock: Callable[[], float] = time.time,
                 max_retries: int = 100) -> None:
        super().__init__(limits, clock=clock)
        if storage not in ("file", "memory"):
            raise ValueError(f"jetstream storage must be 'file' or 'memory', got {storage!r}")
        self._b = Bucket(url, bucket, options=options, secrets=secrets, timeout=timeout,
                         replicas=replicas, storage=storage)
        self._retries = max_retries
        # Per thread, what the last dry run and the last reads saw: the commit and the
        # TTL refresh that follow start from it instead of reading again (a revision
        # that moved meanwhile fails the write, which then reads afresh).
        self._local = threading.local()
        self._groups: dict[str, _Group] = {}
        self._groups_lock = threading.Lock()

    def _after_fork(self) -> None:
        """In a forked child: the commits queued (and the turns held) by the parent's
        threads are the parent's; the bucket renews its own loop and connection."""
        super()._after_fork()
        self._local = threading.local()
        self._groups = {}
        self._groups_lock = threading.Lock()

    def _kept(self) -> dict[str, PluginDocs]:
        kept: dict[str, PluginDocs] | None = getattr(self._local, "plan", None)
        if kept is None:
            kept = self._local.plan = {}
        return kept

    def _seen(self) -> dict[tuple[str, Sid], tuple[dict[str, Entry], int]]:
        seen: dict[tuple[str, Sid], tuple[dict[str, Entry], int]] | None = getattr(
            self._local, "docs", None)
        if seen is None:
            seen = self._local.docs = {}
        return seen

    @property
    def bucket(self) -> str:
        """The key-value bucket's name."""
        return self._b.bucket

    def _doc(self, plugin: str, sid: Sid) -> tuple[dict[str, Entry], int]:
        doc = self._b.get_many([f"s.{token(plugin)}.{scope_token(sid)}"])[0]
        got = scope_doc(doc.value, f"plugin {plugin} scope"), doc.revision
        seen = self._seen()
        if len(seen) >= _SEEN_DOCS:
            seen.pop(next(iter(seen)))
        seen[(plugin, sid)] = got
        return got

    def _read(self, plugin: str, sid: Sid, key: str, now: float) -> bytes | None:
        e = self._doc(plugin, sid)[0].get(key)
        return None if e is None or e[3] <= now else bytes(e[0])

    def _read_within(self, memo: dict[Any, Any], plugin: str, sid: Sid, key: str,
                     now: float) -> bytes | None:
        e = self._doc_within(memo, plugin, sid).get(key)
        return None if e is None or e[3] <= now else bytes(e[0])

    def _keys_within(self, memo: dict[Any, Any], plugin: str, sid: Sid,
                     now: float) -> list[str]:
        return sorted(k for k, e in self._doc_within(memo, plugin, sid).items() if e[3] > now)

    def _doc_within(self, memo: dict[Any, Any], plugin: str, sid: Sid) -> dict[str, Entry]:
        # A scope's document is up to max_payload: a plugin reading many keys (or listing
        # them again and again) in one call would otherwise move the whole document each time.
        doc: dict[str, Entry] | None = memo.get(("doc", sid))
        if doc is None:
            doc = memo[("doc", sid)] = self._doc(plugin, sid)[0]
        return doc

    def _keys(self, plugin: str, sid: Sid, now: float) -> list[str]:
        return sorted(k for k, e in self._doc(plugin, sid)[0].items() if e[3] > now)

    def _touch(self, plugin: str, refs: list[Ref], now: float) -> None:
        by_scope: dict[Sid, list[str]] = {}
        for sid, key in refs:
            by_scope.setdefault(sid, []).append(key)
        seen = self._seen()
        for sid, keys in by_scope.items():
            for attempt in range(_TOUCH_RETRIES):  # lost to a concurrent commit: read again
                last = seen.pop((plugin, sid), None) if attempt == 0 else None
                doc, rev = last if last is not None else self._doc(plugin, sid)
                live = [k for k in keys if k in doc and doc[k][3] > now]
                if not live:
                    break
                tick = self._ticker.take(len(live), now)
                for i, k in enumerate(live):
                    doc[k][3] = now + doc[k][2]
                    doc[k][4] = tick + i
                if self._b.put(f"s.{token(plugin)}.{scope_token(sid)}", pack(doc), rev):
                    break

    @contextmanager
    def _view(self, plugin: str) -> Iterator[LazyDocsView]:
        yield LazyDocsView(self._b, plugin, self._now(), self._kept())

    def _transact(self, plugin: str, now: float, change: Callable[[PluginDocs], Plan | int],
                  sids: Iterable[Sid] = ()) -> tuple[Plan | int, PluginDocs]:
        """Read, change and write one plugin's documents, again while others commit first."""
        sids = list(sids)
        kept = self._kept().pop(plugin, None)
        for _ in range(self._retries):
            reused = kept is not None
            if kept is not None:
                state, kept = kept, None
                state.refresh(now)
            else:
                state = PluginDocs(self._b, plugin, now, sids)
            state.load_expired()
            try:
                result = change(state)
            except CasConflict:
                if reused:  # decided on what the dry run read: decide on a fresh read
                    continue
                raise
            if self._b.commit(state.writes(self.limits)):
                return result, state
        raise StateUnavailable(f"plugin {plugin}: state commit gave up after {self._retries}"
                               " conflicting commits of other hosts", plugin_id=plugin)

    def _plan(self, state: PluginDocs, changes: Changes, now: float) -> Plan:
        state.load(changed_sids(changes))
        done = plan(DocsView(state), changes, now, self.limits)
        state.apply(done, self._ticker.take(len(done.puts), now))
        return done

    def _commit(self, changes: Changes, now: float) -> Plan:
        """Group commit per plugin: the caller queues its changes; whoever holds the
        plugin's turn next plans everything queued on one read and writes it as one
        batch, each change planned after the ones before it (a conflict or a refused
        quota fails only its own change). Commits of one plugin in this process thus
        share a batch instead of failing each other's revision checks."""
        item = _Pending(changes, now, self._kept().pop(changes.plugin, None))
        with self._groups_lock:
            group = self._groups.setdefault(changes.plugin, _Group())
        with group.queue_lock:
            group.queue.append(item)
        while not item.done.is_set():
            if group.turn.acquire(timeout=remaining(self._b.timeout)):
                try:
                    with group.queue_lock:
                        batch, group.queue = group.queue, []
                    if batch:
                        self._lead(changes.plugin, batch)
                finally:
                    group.turn.release()
                continue
            with group.queue_lock:  # the deadline passed while another batch ran
                if item in group.queue:
                    group.queue.remove(item)
                    raise StateUnavailable(f"plugin {changes.plugin}: no turn to commit"
                                           " before the call's deadline",
                                           plugin_id=changes.plugin)
            # taken by the batch running now: its outcome is unknown until it ends
            if not item.done.wait(remaining(self._b.timeout)):
                raise StateUnavailable(f"plugin {changes.plugin}: the commit did not finish"
                                       " before the call's deadline (it may still apply)",
                                       plugin_id=changes.plugin)
        if isinstance(item.result, BaseException):
            raise item.result
        assert item.result is not None
        return item.result

    def _lead(self, plugin: str, batch: list[_Pending]) -> None:
        try:
            try:
                outcome = self._group_commit(plugin, batch)
            except QuotaExceeded:  # a document over max_payload: find whose, one by one
                if len(batch) == 1:
                    raise
                outcome = [self._alone(plugin, it) for it in batch]
        except BaseException as exc:  # unavailable, or a bug: none of them happened
            for it in batch:
                if isinstance(exc, StateUnavailable):  # each caller raises its own
                    it.result = StateUnavailable(exc.message, plugin_id=plugin)
                    it.result.__cause__ = exc
                else:
                    it.result = exc
                it.done.set()
            raise
        for it, result in zip(batch, outcome, strict=True):
            it.result = result
            it.done.set()

    def _alone(self, plugin: str, item: _Pending) -> Plan | StateError:
        try:
            return self._group_commit(plugin, [item])[0]
        except QuotaExceeded as exc:
            return exc

    def _group_commit(self, plugin: str, batch: list[_Pending]
                      ) -> list[Plan | StateError]:
        kept = next((it.kept for it in batch if it.kept is not None), None)
        for _ in range(self._retries):
            # A change whose caller's deadline passed while it was queued is left out:
            # its caller has given up and was told so (it raised, or will).
            late = {id(it) for it in batch
                    if it.deadline is not None and time.monotonic() >= it.deadline}
            sids = set().union(*(changed_sids(it.changes) for it in batch
                                 if id(it) not in late))
            now = self._now()
            reused = kept is not None
            if kept is not None:
                state, kept = kept, None
                state.refresh(now)
            else:
                state = PluginDocs(self._b, plugin, now, sids)
            state.load_expired()
            outcome: list[Plan | StateError] = []
            for it in batch:
                if id(it) in late:
                    outcome.append(StateUnavailable(
                        f"plugin {plugin}: the commit was refused: the call's deadline"
                        " passed while it waited for its turn (nothing written)",
                        plugin_id=plugin))
                    continue
                try:
                    outcome.append(self._plan(state, it.changes, it.now))
                except StateError as exc:  # this change alone: a conflict or a quota
                    outcome.append(exc)
            if reused and any(isinstance(r, CasConflict) for r in outcome):
                continue  # decided on what a dry run read: decide on a fresh read
            if any(id(it) not in late and it.deadline is not None
                   and time.monotonic() >= it.deadline for it in batch):
                continue  # one's caller gave up while the batch was read: plan without it
            if self._b.commit(state.writes(self.limits)):
                return outcome
        raise StateUnavailable(f"plugin {plugin}: state commit gave up after {self._retries}"
                               " conflicting commits of other hosts", plugin_id=plugin)

    def _purge(self, now: float, plugin: str | None) -> int:
        count = 0
        for p in [plugin] if plugin is not None else self._plugins():
            probe = PluginDocs(self._b, p, now)
            if all(first > now for _, _, first in probe.scopes.values()):
                continue
            _, state = self._transact(p, now, lambda state: 0)
            count += state.purged
        return count

    def _plugins(self) -> list[str]:
        out = []
        for key in self._b.list_keys("u.*"):
            try:
                out.append(untoken(key[2:]))
            except (binascii.Error, UnicodeDecodeError, ValueError):
                continue  # not a key this store wrote
        return sorted(out)

    def _drop_plugin(self, plugin: str) -> int:
        count, _ = self._transact(plugin, self._now(), lambda state: state.empty())
        assert isinstance(count, int)
        return count

    def _records(self, now: float) -> list[Record]:
        out = []
        for p in self._plugins():
            state = PluginDocs(self._b, p, now)
            state.load_all()
            out += [Record(p, sid, key, bytes(e[0]), float(e[3]), float(e[2]))
                    for (sid, key), e in state.entries()]
        return out

    def _import(self, batches: dict[str, Changes], replace: bool, now: float) -> None:
        # Every plugin's documents in one atomic batch: a kill at any moment leaves
        # every plugin as it was or as imported.
        for _ in range(self._retries):
            writes: list[Write] = []
            for p, ch in batches.items():
                state = PluginDocs(self._b, p, now)
                if replace:
                    state.empty()
                else:
                    state.load_expired()
                self._plan(state, ch, now)
                writes += state.writes(self.limits)
            if self._b.commit(writes):
                return
        raise StateUnavailable(f"state import gave up after {self._retries} conflicting"
                               " commits of other hosts")

    def connect(self) -> None:
        """Reach the server now (creating the bucket if needed) rather than on first use."""
        self._b.connect()

    def close(self) -> None:
        self._b.close()

