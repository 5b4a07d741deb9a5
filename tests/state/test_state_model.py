"""TTL, LRU and quota accounting of every backend against a naive model (hypothesis.stateful).

The model keeps a plain dict of entries and recomputes everything from it: usage by
summing, LRU order by sorting on a counter, expiry by comparing with the clock. Each
step runs on the store and the model; results, errors, evictions, warnings, usage
and the full contents must agree.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from state_support import FAKE_EPOCH, FakeClock, StoreFactory, store_factory

from wasmext.state import (
    CasConflict,
    KeyTooLong,
    QuotaExceeded,
    Scope,
    SessionQuotaExceeded,
    StateError,
    StateLimits,
    StateStore,
    TooManyKeys,
    Transaction,
)

# Entries cost 9, 19, 34 or 49 bytes: the warning threshold (53) can be hit exactly.
LIMITS = StateLimits(ttl_seconds=10, max_ttl_seconds=100, max_plugin_bytes=200,
                     max_session_bytes=106, session_warn_ratio=0.5, max_keys=3, max_key_bytes=4,
                     entry_overhead_bytes=8)
PLUGINS = ["p", "q"]
SIDS = [None, "s1", "s2"]
Sid = str | None
Ref = tuple[Sid, str]

plugins = st.sampled_from(PLUGINS)
sids = st.sampled_from(SIDS)
keys = st.sampled_from(["a", "b", "c", "d", "a", "b", "a", "b", "long!"])
# sizes chosen so that quotas, warnings and evictions happen within a few steps
values = st.builds(lambda n, b: bytes([b]) * n, st.sampled_from([0, 10, 25, 40]),
                   st.integers(0, 2))
ttls = st.sampled_from([None, 1.0, 5.0, 30.0])
set_op = st.tuples(st.just("set"), st.booleans(), keys, values, ttls)
get_op = st.tuples(st.just("get"), st.booleans(), keys)
op = st.one_of(
    set_op, set_op, set_op, get_op, get_op,
    st.tuples(st.just("delete"), st.booleans(), keys),
    st.tuples(st.just("cas"), st.booleans(), keys, st.sampled_from(["none", "current", "other"]),
              st.none() | values),
    st.tuples(st.just("clear"), st.booleans()),
    st.tuples(st.just("keys"), st.booleans()),
)


@dataclass
class Entry:
    key: str
    value: bytes
    ttl: float
    expires: float
    tick: int = 0

    @property
    def size(self) -> int:
        return len(self.key.encode()) + len(self.value) + LIMITS.entry_overhead_bytes


class Model:
    def __init__(self) -> None:
        self.data: dict[str, dict[Ref, Entry]] = {p: {} for p in PLUGINS}
        self.now = FAKE_EPOCH
        self.ticks = itertools.count()

    def live(self, plugin: str) -> dict[Ref, Entry]:
        return {r: e for r, e in self.data[plugin].items() if e.expires > self.now}

    def read(self, plugin: str, ref: Ref) -> bytes | None:
        e = self.live(plugin).get(ref)
        return None if e is None else e.value

    @staticmethod
    def usage(entries: dict[Ref, Entry], sid: Sid) -> tuple[int, int]:
        sizes = [e.size for r, e in entries.items() if r[0] == sid]
        return sum(sizes), len(sizes)

    def check(self, plugin: str, cleared: set[Sid], writes: dict[Ref, tuple[bytes | None, float]],
              ) -> tuple[dict[Ref, Entry], list[Ref], int]:
        live = self.live(plugin)
        new = {r: e for r, e in live.items() if r[0] not in cleared}
        for (sid, key), (value, ttl) in writes.items():
            new.pop((sid, key), None)
            if value is not None:
                new[(sid, key)] = Entry(key, value, ttl, self.now + ttl)
        touched = set(cleared) | {sid for sid, _ in writes}
        for sid in sorted(touched, key=lambda s: (s is not None, s or "")):
            (b0, n0), (b1, n1) = self.usage(live, sid), self.usage(new, sid)
            if n1 > LIMITS.max_keys and n1 > n0:
                raise TooManyKeys("model")
            if sid is not None and b1 > LIMITS.max_session_bytes and b1 > b0:
                raise SessionQuotaExceeded("model")
        if sum(new[r].size for r, (v, _) in writes.items() if v is not None) > \
                LIMITS.max_plugin_bytes:
            raise QuotaExceeded("model")
        warn_at = LIMITS.session_warn_ratio * LIMITS.max_session_bytes
        warnings = sum(1 for sid in touched if sid is not None
                       and self.usage(live, sid)[0] < warn_at <= self.usage(new, sid)[0])
        total = sum(e.size for e in new.values())
        evicted = []
        for ref, e in sorted(((r, e) for r, e in new.items() if r not in writes),
                             key=lambda item: item[1].tick):
            if total <= LIMITS.max_plugin_bytes:
                break
            del new[ref]
            evicted.append(ref)
            total -= e.size
        return new, evicted, warnings

    def commit(self, plugin: str, cleared: set[Sid], writes: dict[Ref, tuple[bytes | None, float]],
               expect: dict[Ref, bytes | None], touched: list[Ref]) -> tuple[list[Ref], int]:
        live = self.live(plugin)
        for ref in touched:
            if ref not in writes and ref[0] not in cleared and ref in live:
                live[ref].expires = self.now + live[ref].ttl
                live[ref].tick = next(self.ticks)
        if not (cleared or writes or expect):
            return [], 0
        self.data[plugin] = live  # purge
        for ref, expected in expect.items():
            if self.read(plugin, ref) != expected:
                raise CasConflict("model")
        new, evicted, warnings = self.check(plugin, cleared, writes)
        for ref, (value, _) in writes.items():
            if value is not None:
                new[ref].tick = next(self.ticks)
        self.data[plugin] = new
        return evicted, warnings


class ModelTxn:
    """The model of one transaction: an overlay, checked like the store checks it."""

    def __init__(self, model: Model, plugin: str, session: str) -> None:
        self.m, self.plugin, self.session = model, plugin, session
        self.cleared: set[Sid] = set()
        self.writes: dict[Ref, tuple[bytes | None, float]] = {}
        self.expect: dict[Ref, bytes | None] = {}
        self.touched: list[Ref] = []

    def lookup(self, ref: Ref) -> tuple[bytes | None, bool]:
        if ref in self.writes:
            return self.writes[ref][0], False
        if ref[0] in self.cleared:
            return None, False
        value = self.m.read(self.plugin, ref)
        if value is not None and ref not in self.touched:
            self.touched.append(ref)
        return value, True

    def stage(self, ref: Ref, value: bytes | None, ttl: float) -> None:
        saved = dict(self.writes)
        self.writes.pop(ref, None)
        self.writes[ref] = (value, ttl)
        if value is not None:
            try:
                self.m.check(self.plugin, self.cleared, self.writes)
            except StateError:
                self.writes = saved
                raise

    def run(self, step: tuple[Any, ...]) -> Any:
        name, plugin_scope = step[0], step[1]
        sid = None if plugin_scope else self.session
        if name == "keys":
            found = {k for (s, k) in self.m.live(self.plugin) if s == sid} \
                if sid not in self.cleared else set()
            for (s, k), (v, _) in self.writes.items():
                if s == sid:
                    (found.discard if v is None else found.add)(k)
            return sorted(found)
        if name == "clear":
            count = len(self.run(("keys", plugin_scope)))
            self.cleared.add(sid)
            self.writes = {r: w for r, w in self.writes.items() if r[0] != sid}
            return count
        key = step[2]
        if len(key) > LIMITS.max_key_bytes:
            raise KeyTooLong("model")
        ref = (sid, key)
        if name == "get":
            return self.lookup(ref)[0]
        if name == "delete":
            existed = self.lookup(ref)[0] is not None
            self.stage(ref, None, LIMITS.ttl_seconds)
            return existed
        if name == "set":
            self.stage(ref, step[3], step[4] or LIMITS.ttl_seconds)
            return None
        expected, new = step[3], step[4]
        current, from_store = self.lookup(ref)
        if current != expected:
            raise CasConflict("model")
        added = from_store and ref not in self.expect
        if added:
            self.expect[ref] = expected
        try:
            self.stage(ref, new, LIMITS.ttl_seconds)
        except StateError:
            if added:
                del self.expect[ref]
            raise
        return None

    def commit(self) -> tuple[list[Ref], int]:
        return self.m.commit(self.plugin, self.cleared, self.writes, self.expect, self.touched)


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except StateError as exc:
        return "error", type(exc)


def run_on_store(txn: Transaction, step: tuple[Any, ...]) -> Any:
    name, scope = step[0], "plugin" if step[1] else "session"
    if name == "keys":
        return txn.keys(scope=scope)
    if name == "clear":
        return txn.clear(scope=scope)
    if name == "get":
        return txn.get(step[2], scope=scope)
    if name == "delete":
        return txn.delete(step[2], scope=scope)
    if name == "set":
        return txn.set(step[2], step[3], scope=scope, ttl=step[4])
    return txn.cas(step[2], step[3], step[4], scope=scope)


class StateMachine(RuleBasedStateMachine):
    factory: StoreFactory
    names = itertools.count()

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.store: StateStore = self.factory(LIMITS, self.clock, f"m{next(self.names)}")
        self.model = Model()

    def teardown(self) -> None:
        self.store.close()

    def both(self, plugin: str, session: str, steps: list[tuple[Any, ...]], commit: bool,
             ) -> None:
        txn, mtxn = self.store.begin(plugin, session), ModelTxn(self.model, plugin, session)
        for step in steps:
            if step[0] == "cas":  # pick the expected value from what the model sees now
                sid = None if step[1] else session
                current = mtxn.lookup((sid, step[2]))[0] if len(step[2]) <= 4 else None
                expected = {"none": None, "current": current, "other": b"other"}[step[3]]
                step = (*step[:3], expected, step[4])
            result = outcome(run_on_store, txn, step)
            assert result == outcome(mtxn.run, step), step
            if result[0] == "error":
                event(f"{step[0]} failed: {result[1].__name__}")
        if not commit:
            txn.rollback()
            return
        self.compare(outcome(txn.commit), outcome(mtxn.commit))

    @staticmethod
    def compare(got: tuple[str, Any], want: tuple[str, Any]) -> None:
        if got[0] == "ok":
            got = ("ok", ([(e.session, e.key) for e in got[1].evicted], len(got[1].warnings)))
            event("commit evicted" if got[1][0] else "commit evicted nothing")
            event("commit warned" if got[1][1] else "commit did not warn")
        else:
            event(f"commit failed: {got[1].__name__}")
        assert got == want

    @rule(plugin=plugins, session=st.sampled_from(["s1", "s2"]), step=op)
    def one_op(self, plugin: str, session: str, step: tuple[Any, ...]) -> None:
        if step[0] == "set" and step[1] and step[4] is None:  # the one-shot store API too
            got = outcome(self.store.set, Scope(plugin), step[2], step[3])
            mtxn = ModelTxn(self.model, plugin, session)
            want = outcome(lambda: (mtxn.run(step), mtxn.commit())[1])
            self.compare(got, want)
            return
        self.both(plugin, session, [step], commit=True)

    @rule(plugin=plugins, session=st.sampled_from(["s1", "s2"]),
          steps=st.lists(op, min_size=1, max_size=5), commit=st.booleans())
    def transaction(self, plugin: str, session: str, steps: list[tuple[Any, ...]],
                    commit: bool) -> None:
        self.both(plugin, session, steps, commit)

    @rule(plugin=plugins, session=st.sampled_from(["s1", "s2"]),
          steps=st.lists(set_op, min_size=1, max_size=3))
    def fill(self, plugin: str, session: str, steps: list[tuple[Any, ...]]) -> None:
        self.both(plugin, session, steps, commit=True)

    @rule(seconds=st.sampled_from([0.5, 0.5, 1.0, 1.0, 2.0, 3.0, 10.0, 31.0]),
          end=st.sampled_from([None] * 4 + [("s1", None), ("s2", "p"), ("s1", "q")]))
    def time_passes(self, seconds: float, end: tuple[str, str | None] | None) -> None:
        """The clock moves on; now and then a session ends."""
        self.clock.advance(seconds)
        self.model.now += seconds
        if end is None:
            return
        session, plugin = end
        count = 0
        for p in [plugin] if plugin else PLUGINS:
            live = self.model.live(p)
            count += sum(1 for r in live if r[0] == session)
            self.model.data[p] = {r: e for r, e in live.items() if r[0] != session}
        assert self.store.end_session(session, plugin) == count

    @invariant()
    def same_contents_and_usage(self) -> None:
        want = sorted((p, r[0] or "", r[1], e.value, e.expires, e.ttl)
                      for p in PLUGINS for r, e in self.model.live(p).items())
        got = sorted((r.plugin, r.session or "", r.key, r.value, r.expires_at, r.ttl)
                     for r in self.store.records())
        assert got == want
        for p in PLUGINS:
            live = self.model.live(p)
            total = sum(e.size for e in live.values())
            assert total <= LIMITS.max_plugin_bytes
            for sid in SIDS:
                usage = self.store.usage(Scope(p, sid))
                assert (usage.plugin_bytes, usage.scope_bytes, usage.scope_keys) == (
                    total, *Model.usage(live, sid))


# The accounting is shared code: the memory run explores it, the others check each
# backend's primitives (more cheaply: every step's invariant costs round trips). The
# default tier runs a short walk of every backend (a JetStream example is about a second);
# the slow tier walks six times as far.
EXAMPLES = {"memory": 50, "sqlite": 10, "redis": 6, "jetstream": 3}
DEEP = {backend: 6 * n for backend, n in EXAMPLES.items()}


@pytest.mark.parametrize("examples", [pytest.param(EXAMPLES, id="short"),
                                      pytest.param(DEEP, id="deep", marks=pytest.mark.slow)])
def test_store_matches_the_model(backend: str, examples: dict[str, int], tmp_path: Path,
                                 request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(f"{backend}_url") if backend in ("redis", "jetstream") \
        else None
    make, opened = store_factory(backend, tmp_path, url)
    machine = type("Machine", (StateMachine,), {"factory": staticmethod(make)})
    try:
        run_state_machine_as_test(machine, settings=settings(
            max_examples=examples[backend], stateful_step_count=50, deadline=None,
            suppress_health_check=[HealthCheck.too_slow]))
    finally:
        for store in opened:
            store.close()
