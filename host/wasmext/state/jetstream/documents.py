"""A plugin's state as documents in a JetStream key-value bucket: the layout, and
one plugin's documents as read for a commit (`PluginDocs`) with the read-only views
the planner asks (`DocsView`, `LazyDocsView`).

Layout, in one key-value bucket (`wasmext_state` unless configured; history 1):

    s.<plugin>.<scope>   a scope's entries: a MessagePack map
                         key -> [value, size, ttl, expires_at, lru tick]
    u.<plugin>           the plugin's accounting: {"t": total bytes,
                         "s": {<scope>: [bytes, keys, earliest expiry]}}

`<plugin>` is the id's UTF-8 in unpadded base64url; `<scope>` is `g` for the
plugin-global scope and `s` + the session id's base64url for a session.
Why this layout rather than one key per entry: `store`'s docstring.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import msgpack

from wasmext.state.accounting import Changes, Plan, Ref, Sid
from wasmext.state.base import (
    QuotaExceeded,
    StateLimits,
    StateUnavailable,
)
from wasmext.state.jetstream.connection import Bucket, Doc, Write

__all__ = [
    "ENVELOPE",
    "DocsView",
    "Entry",
    "LazyDocsView",
    "PluginDocs",
    "changed_sids",
    "pack",
    "scope_doc",
    "scope_token",
    "token",
    "untoken",
]

ENVELOPE = 1024  # headers and subject of a message, beside its document

Entry = list[Any]  # [value, size, ttl, expires_at, tick]


def token(text: str) -> str:
    """`text` as a key token: its UTF-8 in unpadded base64url."""
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def untoken(token: str) -> str:
    """The text a key token stands for."""
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("utf-8")


def scope_token(sid: Sid) -> str:
    """A scope's key token: `g` for the plugin-global scope, `s` + the session's token."""
    return "g" if sid is None else "s" + token(sid)


def scope_sid(token: str) -> Sid:
    """The scope a scope token names."""
    return None if token == "g" else untoken(token[1:])


def unpack(raw: bytes | None, what: str) -> dict[str, Any]:
    """A stored document as a map ({} when absent); a damaged one is StateUnavailable."""
    if not raw:
        return {}
    try:
        doc = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise StateUnavailable(f"jetstream: the {what} document is damaged: {exc}") from None
    if not isinstance(doc, dict):
        raise StateUnavailable(f"jetstream: the {what} document is damaged: not a map")
    return doc


def _num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def scope_doc(raw: bytes | None, what: str) -> dict[str, Entry]:
    """A scope document, every entry checked: [bytes, int, number, number, int]."""
    doc = unpack(raw, what)
    for e in doc.values():
        if not (isinstance(e, list) and len(e) == 5 and isinstance(e[0], bytes)
                and type(e[1]) is int and _num(e[2]) and _num(e[3]) and type(e[4]) is int):
            raise StateUnavailable(f"jetstream: the {what} document is damaged: a bad entry")
    return doc


def usage_doc(raw: bytes | None, what: str) -> dict[Sid, list[Any]]:
    """An accounting document's scopes: sid -> [bytes, keys, earliest expiry], checked."""
    scopes = unpack(raw, what).get("s", {})
    try:
        out = {scope_sid(t): list(v) for t, v in scopes.items()}
    except (AttributeError, TypeError, ValueError, binascii.Error):
        raise StateUnavailable(f"jetstream: the {what} document is damaged") from None
    if not all(len(v) == 3 and type(v[0]) is int and type(v[1]) is int and _num(v[2])
               for v in out.values()):
        raise StateUnavailable(f"jetstream: the {what} document is damaged: a bad scope")
    return out


def pack(doc: Mapping[str, Any]) -> bytes:
    """A document as stored."""
    return msgpack.packb(doc, use_bin_type=True)  # type: ignore[no-any-return]


class PluginDocs:
    """One plugin's documents as read for one commit, and the changes made to them."""

    def __init__(self, bucket: Bucket, plugin: str, now: float, sids: Iterable[Sid] = ()
                 ) -> None:
        self.bucket, self.plugin, self.now = bucket, plugin, now
        self.ptok = token(plugin)
        want = list(dict.fromkeys(sids))  # read along with the accounting: one round trip
        usage, *docs = bucket.get_many([self.usage_key, *(self.scope_key(s) for s in want)])
        self.usage_rev = usage.revision
        # sid -> [bytes, keys, earliest expiry]
        self.scopes = usage_doc(usage.value, f"plugin {plugin} accounting")
        self.docs: dict[Sid, dict[str, Entry]] = {}
        self.revs: dict[Sid, int] = {}
        self.dirty: set[Sid] = set()
        self.purged = 0
        self.emptied = False  # every scope deleted (a replacing import, a drop)
        self._store(want, docs)

    @property
    def usage_key(self) -> str:
        """The key of the plugin's accounting document."""
        return f"u.{self.ptok}"

    def scope_key(self, sid: Sid) -> str:
        """The key of one of the plugin's scope documents."""
        return f"s.{self.ptok}.{scope_token(sid)}"

    def load(self, sids: Iterable[Sid]) -> None:
        """Read the documents of `sids` not read yet (concurrently) and purge them."""
        want = [sid for sid in dict.fromkeys(sids) if sid not in self.docs]
        if want:
            self._store(want, self.bucket.get_many([self.scope_key(s) for s in want]))

    def _store(self, sids: list[Sid], docs: list[Doc]) -> None:
        for sid, doc in zip(sids, docs, strict=True):
            self.revs[sid] = doc.revision
            self.docs[sid] = {} if self.emptied else scope_doc(
                doc.value, f"plugin {self.plugin} scope")
            self._purge(sid)

    def refresh(self, now: float) -> None:
        """Move this state (read for a dry run) to a later commit time: purge again."""
        self.now = now
        for sid in list(self.docs):
            self._purge(sid)

    def load_expired(self) -> None:
        """Read (and so purge) every scope whose earliest expiry has passed."""
        self.load(sid for sid, (_, _, first) in self.scopes.items() if first <= self.now)

    def load_all(self) -> None:
        """Read every scope of the plugin."""
        self.load(list(self.scopes))

    def _purge(self, sid: Sid) -> None:
        entries = self.docs[sid]
        dead = [k for k, e in entries.items() if e[3] <= self.now]
        for k in dead:
            del entries[k]
        self.purged += len(dead)
        self._account(sid, changed=bool(dead))

    def _account(self, sid: Sid, *, changed: bool) -> None:
        entries = self.docs[sid]
        if changed:
            self.dirty.add(sid)
        if entries:
            self.scopes[sid] = [sum(e[1] for e in entries.values()), len(entries),
                                min(e[3] for e in entries.values())]
        else:
            self.scopes.pop(sid, None)

    def empty(self) -> int:
        """Delete every scope (all read first, so their revisions are checked); the count."""
        self.load_all()
        count = sum(len(d) for d in self.docs.values())
        for sid in self.docs:
            self.docs[sid] = {}
            self._account(sid, changed=True)
        self.emptied = True
        return count

    def apply(self, done: Plan, ticks: int) -> None:
        """Write a plan into the documents (every touched scope is loaded)."""
        for sid, key in done.deletes:
            self.load([sid])
            self.docs[sid].pop(key, None)
        touched = {sid for sid, _ in done.deletes}
        for i, put in enumerate(done.puts):
            self.load([put.sid])
            self.docs[put.sid][put.key] = [put.value, put.size, put.ttl, put.expires_at,
                                           ticks + i]
            touched.add(put.sid)
        for sid in touched:
            self._account(sid, changed=True)

    def writes(self, limits: StateLimits) -> list[Write]:
        """The batch that stores what changed: the scopes, then the accounting."""
        out = []
        room = self.bucket.max_payload - ENVELOPE
        for sid in sorted(self.dirty, key=lambda s: (s is not None, s or "")):
            entries = self.docs[sid]
            raw = pack(entries) if entries else None
            if raw is not None and len(raw) > room:
                where = "global scope" if sid is None else f"session {sid}"
                raise QuotaExceeded(
                    f"plugin {self.plugin} {where}: its state document would be {len(raw)}"
                    f" bytes, over the NATS server's max_payload of {self.bucket.max_payload}"
                    " (raise max_payload in nats-server's configuration)",
                    plugin_id=self.plugin)
            if raw is not None or self.revs[sid]:  # else it never existed: nothing to do
                out.append(Write(self.scope_key(sid), raw, self.revs[sid]))
        if self.scopes:
            usage = pack({"t": sum(v[0] for v in self.scopes.values()),
                           "s": {scope_token(sid): v for sid, v in self.scopes.items()}})
            if len(usage) > room:
                # One line per scope holding state: a plugin writing into ever more live
                # sessions would otherwise grow it past what the server takes, and then
                # every commit of the plugin would fail as the host's fault.
                raise QuotaExceeded(
                    f"plugin {self.plugin}: state in {len(self.scopes)} sessions at once;"
                    f" its accounting document would be {len(usage)} bytes, over the NATS"
                    f" server's max_payload of {self.bucket.max_payload} (end sessions, or"
                    " raise max_payload in nats-server's configuration)",
                    plugin_id=self.plugin)
            out.append(Write(self.usage_key, usage, self.usage_rev))
        elif self.usage_rev:
            out.append(Write(self.usage_key, None, self.usage_rev))
        return out

    def entries(self) -> Iterator[tuple[Ref, Entry]]:
        """Every loaded entry."""
        for sid, doc in self.docs.items():
            for key, e in doc.items():
                yield (sid, key), e


def changed_sids(changes: Changes) -> set[Sid]:
    """The scopes a commit's changes touch."""
    return set(changes.cleared) | {sid for sid, _ in changes.writes} \
        | {sid for sid, _ in changes.expect}


class DocsView:
    """`accounting.View` over a `PluginDocs`: loads the documents a plan asks about."""

    def __init__(self, state: PluginDocs) -> None:
        self._s = state

    def plugin_bytes(self) -> int:
        """Bytes the plugin holds in every scope."""
        return sum(int(v[0]) for v in self._s.scopes.values())

    def scope_usage(self, sids: Iterable[Sid]) -> dict[Sid, tuple[int, int]]:
        """Bytes and key count of each scope."""
        sids = list(sids)
        self._s.load(sids)  # exact (expired entries purged) for the scopes a plan checks
        return {sid: (int(v[0]), int(v[1])) if (v := self._s.scopes.get(sid)) else (0, 0)
                for sid in sids}

    def sizes(self, refs: Iterable[Ref]) -> dict[Ref, int]:
        """Stored size of each ref that exists."""
        refs = list(refs)
        self._s.load(sid for sid, _ in refs)
        return {r: int(e[1]) for r in refs if (e := self._s.docs[r[0]].get(r[1])) is not None}

    def values(self, refs: Iterable[Ref]) -> dict[Ref, bytes]:
        """Stored value of each ref that exists."""
        refs = list(refs)
        self._s.load(sid for sid, _ in refs)
        return {r: bytes(e[0]) for r in refs
                if (e := self._s.docs[r[0]].get(r[1])) is not None}

    def scope_sizes(self, sid: Sid) -> dict[str, int]:
        """Size of each key of the scope."""
        self._s.load([sid])
        return {k: int(e[1]) for k, e in self._s.docs[sid].items()}

    def lru(self) -> Iterator[tuple[Ref, int]]:
        """The plugin's entries with their sizes, least recently used first."""
        self._s.load_all()
        for ref, e in sorted(self._s.entries(), key=lambda item: item[1][4]):
            yield ref, int(e[1])



class LazyDocsView:
    """The view of a dry run: reads the accounting with the scopes of the changes
    (`prefetch`, which the engine calls first) in one round trip, and leaves what it
    read in `kept` for the commit that usually follows."""

    def __init__(self, bucket: Bucket, plugin: str, now: float,
                 kept: dict[str, PluginDocs]) -> None:
        self._args = (bucket, plugin, now)
        self._kept = kept
        self._view: DocsView | None = None

    def _make(self, sids: Iterable[Sid]) -> DocsView:
        state = PluginDocs(*self._args, sids)
        self._kept.clear()
        self._kept[state.plugin] = state
        return DocsView(state)

    def prefetch(self, changes: Changes) -> None:
        """Read the accounting and the scopes `changes` touch, concurrently."""
        if self._view is None:
            self._view = self._make(changed_sids(changes))

    def _v(self) -> DocsView:
        if self._view is None:
            self._view = self._make(())
        return self._view

    def plugin_bytes(self) -> int:
        """Bytes the plugin holds in every scope."""
        return self._v().plugin_bytes()

    def scope_usage(self, sids: Iterable[Sid]) -> dict[Sid, tuple[int, int]]:
        """Bytes and key count of each scope."""
        return self._v().scope_usage(sids)

    def sizes(self, refs: Iterable[Ref]) -> dict[Ref, int]:
        """Stored size of each ref that exists."""
        return self._v().sizes(refs)

    def values(self, refs: Iterable[Ref]) -> dict[Ref, bytes]:
        """Stored value of each ref that exists."""
        return self._v().values(refs)

    def scope_sizes(self, sid: Sid) -> dict[str, int]:
        """Size of each key of the scope."""
        return self._v().scope_sizes(sid)

    def lru(self) -> Iterator[tuple[Ref, int]]:
        """The plugin's entries with their sizes, least recently used first."""
        return self._v().lru()

