"""One behaviour, every backend: memory, SQLite and a real redis-server."""

from __future__ import annotations

import logging
import threading
from typing import Any

import msgpack
import pytest
from state_support import FakeClock, StoreFactory

from wasmext.errors import WasmextError
from wasmext.state import (
    CasConflict,
    InvalidArgument,
    InvalidKey,
    KeyTooLong,
    MemoryStore,
    QuotaExceeded,
    Record,
    Scope,
    SessionQuotaExceeded,
    StateError,
    StateLimits,
    TooManyKeys,
    TransactionClosed,
)

S1 = Scope("p", "s1")
S2 = Scope("p", "s2")
G = Scope("p")
Q1 = Scope("q", "s1")
SMALL = StateLimits(ttl_seconds=10, max_plugin_bytes=1000, max_session_bytes=400,
                    max_keys=4, max_key_bytes=8, entry_overhead_bytes=0)


def snapshot(store: object) -> list[tuple[str, str | None, str, bytes]]:
    return [(r.plugin, r.session, r.key, r.value) for r in store.records()]  # type: ignore[attr-defined]


# -- values and scopes --------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    b"", b"\x00", bytes(range(256)), msgpack.packb({"a": [1, 2.5, None, True, b"\xff"]}),
    msgpack.packb("é" * 1000), b"\xc1" * 100_000,
])
def test_values_round_trip_byte_for_byte(make_store: StoreFactory, value: bytes) -> None:
    store = make_store(StateLimits(max_session_bytes=1 << 20))
    store.set(S1, "k", value)
    assert store.get(S1, "k") == value
    assert store.records()[0].value == value


def test_scopes_are_isolated(make_store: StoreFactory) -> None:
    store = make_store()
    for i, scope in enumerate([S1, S2, G, Q1, Scope("q")]):
        store.set(scope, "k", b"%d" % i)
    assert [store.get(s, "k") for s in (S1, S2, G, Q1, Scope("q"))] == [b"0", b"1", b"2", b"3",
                                                                        b"4"]
    with store.begin("p", "s1") as txn:
        assert txn.get("k") == b"0"
        assert txn.get("k", scope="plugin") == b"2"
    assert store.keys(S1) == ["k"]


def test_get_delete_keys_clear(make_store: StoreFactory) -> None:
    store = make_store()
    assert store.get(S1, "nope") is None
    for key in ["b", "a", "ab", "c"]:
        store.set(S1, key, key.encode())
    assert store.keys(S1) == ["a", "ab", "b", "c"]
    assert store.keys(S1, prefix="a") == ["a", "ab"]
    assert store.delete(S1, "a") is True
    assert store.delete(S1, "a") is False
    store.set(S2, "x", b"1")
    assert store.clear(S1) == 3
    assert store.keys(S1) == []
    assert store.keys(S2) == ["x"]


def test_bad_arguments_are_invalid(make_store: StoreFactory) -> None:
    store = make_store(SMALL)
    for key in ["", "a\x00b", 7, "\ud800"]:
        with pytest.raises(InvalidKey) as exc:
            store.set(S1, key, b"v")  # type: ignore[arg-type]
        assert exc.value.code == "invalid"
    with pytest.raises(InvalidArgument):
        store.set(S1, "k", "text")  # type: ignore[arg-type]
    for ttl in [0, -1, float("inf"), 10**9, True]:
        with pytest.raises(InvalidArgument):
            store.set(S1, "k", b"v", ttl=ttl)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument), store.begin("p") as txn:
        txn.get("k")  # no session: only the plugin scope exists
    with pytest.raises(InvalidArgument):
        Scope("p", "")
    assert store.records() == []


# -- TTL ------------------------------------------------------------------------------------

def test_ttl_expires_and_reads_refresh(make_store: StoreFactory, clock: FakeClock) -> None:
    store = make_store(SMALL, clock)
    store.set(S1, "read", b"r")
    store.set(S1, "unread", b"u")
    store.set(S1, "short", b"s", ttl=2)
    clock.advance(9)
    assert store.get(S1, "read") == b"r"  # refreshed: expires 10 s from now
    assert store.keys(S1) == ["read", "unread"]
    clock.advance(1)  # exactly 10 s after the write: expired
    assert store.get(S1, "unread") is None
    assert store.keys(S1) == ["read"]
    clock.advance(8.9)
    assert store.get(S1, "read") == b"r"
    clock.advance(10)
    assert store.get(S1, "read") is None
    assert store.records() == []
    assert store.usage(S1).scope_keys == 0
    assert store.usage(S1).plugin_bytes == 0


def test_default_ttl_is_an_hour_and_configurable(make_store: StoreFactory,
                                                  clock: FakeClock) -> None:
    assert StateLimits().ttl_seconds == 3600
    store = make_store(clock=clock)
    store.set(S1, "k", b"v")
    assert store.records()[0].expires_at == pytest.approx(clock.now + 3600)
    clock.advance(3599)
    assert store.get(S1, "k") == b"v"
    clock.advance(3600)
    assert store.get(S1, "k") is None


def test_purge_expired(make_store: StoreFactory, clock: FakeClock) -> None:
    store = make_store(SMALL, clock)
    store.set(S1, "a", b"1", ttl=1)
    store.set(Q1, "b", b"2", ttl=1)
    store.set(G, "c", b"3", ttl=5)
    clock.advance(2)
    assert store.purge_expired() == 2
    assert store.purge_expired() == 0
    assert snapshot(store) == [("p", None, "c", b"3")]


# -- sessions -------------------------------------------------------------------------------

def test_end_session_cleans_only_that_session(make_store: StoreFactory) -> None:
    store = make_store()
    for scope in (S1, S2, G, Q1):
        store.set(scope, "k", b"v")
    assert store.end_session("s1", plugin_id="q") == 1
    assert store.get(Q1, "k") is None
    store.set(Q1, "k", b"v")
    assert store.end_session("s1") == 2
    assert snapshot(store) == [("p", None, "k", b"v"), ("p", "s2", "k", b"v")]
    assert store.usage(S1).scope_bytes == 0
    assert store.end_session("s1") == 0


def test_reconnecting_session_gets_its_state_back(make_store: StoreFactory, backend: str,
                                                  clock: FakeClock) -> None:
    if backend == "memory":
        pytest.skip("the memory store keeps nothing across processes")
    store = make_store(clock=clock)
    with store.begin("p", "s1") as txn:
        txn.set("k", b"v")
        txn.set("g", b"w", scope="plugin")
    store.close()
    again = make_store(clock=clock)  # a restarted host, or another host sharing the state
    with again.begin("p", "s1") as txn:
        assert txn.get("k") == b"v"
        assert txn.get("g", scope="plugin") == b"w"
    assert again.usage(S1).scope_keys == 1


def test_drop_plugin(make_store: StoreFactory) -> None:
    store = make_store()
    store.set(S1, "a", b"1")
    store.set(G, "b", b"2")
    store.set(Q1, "c", b"3")
    assert store.drop_plugin("p") == 2
    assert snapshot(store) == [("q", "s1", "c", b"3")]
    assert store.usage(S1).plugin_bytes == 0
    store.set(S1, "a", b"1")
    assert store.get(S1, "a") == b"1"


# -- quotas ---------------------------------------------------------------------------------

def test_key_length_limit(make_store: StoreFactory) -> None:
    store = make_store(SMALL)
    store.set(S1, "k" * 8, b"v")
    with pytest.raises(KeyTooLong) as exc:
        store.set(S1, "k" * 9, b"v")
    assert exc.value.code == "limit"
    assert isinstance(exc.value, QuotaExceeded)
    with pytest.raises(KeyTooLong):
        store.set(S1, "é" * 5, b"v")  # 10 UTF-8 bytes
    assert store.keys(S1) == ["k" * 8]


def test_key_count_limit_rejects_and_changes_nothing(make_store: StoreFactory) -> None:
    store = make_store(SMALL)
    for i in range(4):
        store.set(S1, f"k{i}", b"v")
    before = snapshot(store)
    with pytest.raises(TooManyKeys, match="max_keys") as exc:
        store.set(S1, "k4", b"v")
    assert exc.value.code == "limit"
    assert snapshot(store) == before
    store.set(S1, "k0", b"replaced")  # replacing a key does not add one
    store.set(S2, "k4", b"v")  # the limit is per scope
    store.delete(S1, "k1")
    store.set(S1, "k4", b"v")


def test_session_quota_warns_at_80_percent_then_rejects(make_store: StoreFactory,
                                                        caplog: pytest.LogCaptureFixture,
                                                        ) -> None:
    store = make_store(SMALL)  # 400 bytes per session, warning at 320
    assert store.set(S1, "a", b"x" * 299).warnings == ()  # 300 bytes
    with caplog.at_level(logging.WARNING, logger="wasmext.state"):
        report = store.set(S1, "b", b"x" * 29)  # 330
    assert len(report.warnings) == 1
    assert "session s1" in report.warnings[0]
    assert "330 of 400" in caplog.text
    assert store.stats().warnings == 1
    assert store.set(S1, "c", b"x").warnings == ()  # warned once, when crossing
    before = snapshot(store)
    with pytest.raises(SessionQuotaExceeded, match="max_session_bytes") as exc:
        store.set(S1, "d", b"x" * 100)
    assert exc.value.code == "limit"
    assert snapshot(store) == before
    assert store.stats().rejected == 1
    store.set(G, "d", b"x" * 100)  # the plugin-global scope is not a session


def test_plugin_quota_evicts_least_recently_used(make_store: StoreFactory, clock: FakeClock,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    store = make_store(SMALL, clock)  # 1000 bytes per plugin, no per-entry overhead
    store.set(S1, "old", b"x" * 197)  # 200 bytes each
    clock.advance(1)
    store.set(S2, "older", b"x" * 195)
    clock.advance(1)
    store.set(G, "mid", b"x" * 197)
    store.set(Scope("p", "s3"), "new", b"x" * 197)
    store.set(Q1, "other", b"x" * 395)  # another plugin's quota
    assert store.get(S1, "old") == b"x" * 197  # now the most recently used
    with caplog.at_level(logging.WARNING, logger="wasmext.state"):
        report = store.set(G, "big", b"x" * 597)  # 600: the total would be 1400
    assert [(e.session, e.key, e.size) for e in report.evicted] == [("s2", "older", 200),
                                                                   (None, "mid", 200)]
    assert store.get(S2, "older") is None
    assert store.get(G, "mid") is None
    assert store.get(S1, "old") is not None
    assert store.get(Q1, "other") is not None
    assert store.usage(S1).plugin_bytes == 1000
    stats = store.stats()
    assert (stats.evictions, stats.evicted_bytes, stats.evictions_by_plugin) == (2, 400,
                                                                                 {"p": 2})
    assert caplog.text.count("evicted plugin p") == 2


def test_write_larger_than_the_plugin_quota_is_rejected(make_store: StoreFactory) -> None:
    store = make_store(SMALL.replace(max_session_bytes=5000))
    store.set(S1, "a", b"x" * 500)
    txn = store.begin("p", "s1")
    txn.set("b", b"x" * 600)  # fits after evicting "a"
    with pytest.raises(QuotaExceeded, match="max_plugin_bytes"):
        txn.set("c", b"x" * 600)  # 1200 bytes in one commit never fit
    assert txn.get("c") is None
    txn.rollback()
    assert snapshot(store) == [("p", "s1", "a", b"x" * 500)]


def test_entry_overhead_counts(make_store: StoreFactory) -> None:
    store = make_store(StateLimits(entry_overhead_bytes=64))
    store.set(S1, "key", b"12345")
    assert store.usage(S1).scope_bytes == 3 + 5 + 64


# -- transactions ---------------------------------------------------------------------------

def test_transaction_isolation_and_commit(make_store: StoreFactory) -> None:
    store = make_store()
    store.set(S1, "a", b"old")
    txn = store.begin("p", "s1")
    txn.set("a", b"new")
    txn.set("b", b"b")
    txn.set("g", b"g", scope="plugin")
    assert txn.delete("a") is True
    assert txn.get("a") is None
    txn.set("a", b"newer")
    assert txn.get("a") == b"newer"
    assert txn.keys() == ["a", "b"]
    assert txn.pending == 3
    assert store.get(S1, "a") == b"old"  # others see nothing yet
    assert store.get(G, "g") is None
    txn.commit()
    assert snapshot(store) == [("p", None, "g", b"g"), ("p", "s1", "a", b"newer"),
                               ("p", "s1", "b", b"b")]
    with pytest.raises(TransactionClosed):
        txn.set("c", b"c")
    with pytest.raises(TransactionClosed):
        txn.commit()


def test_rollback_and_exceptions_discard_everything(make_store: StoreFactory) -> None:
    store = make_store()
    store.set(S1, "keep", b"1")
    txn = store.begin("p", "s1")
    txn.set("a", b"1")
    txn.clear()
    txn.rollback()
    txn.rollback()

    def faulting_call() -> None:
        with store.begin("p", "s1") as txn:
            txn.set("b", b"2")
            txn.delete("keep")
            raise RuntimeError("the plugin call faulted")

    with pytest.raises(RuntimeError):
        faulting_call()
    assert snapshot(store) == [("p", "s1", "keep", b"1")]


def test_clear_inside_a_transaction(make_store: StoreFactory) -> None:
    store = make_store()
    for key in "abc":
        store.set(S1, key, b"v")
    store.set(G, "g", b"v")
    with store.begin("p", "s1") as txn:
        txn.set("d", b"v")
        assert txn.clear() == 4
        assert txn.keys() == []
        assert txn.get("a") is None
        txn.set("b", b"again")
        assert txn.keys() == ["b"]
    assert snapshot(store) == [("p", None, "g", b"v"), ("p", "s1", "b", b"again")]
    assert store.usage(S1).scope_keys == 1


def test_quota_checked_at_write_time_inside_a_transaction(make_store: StoreFactory) -> None:
    store = make_store(SMALL)
    with store.begin("p", "s1") as txn:
        for i in range(4):
            txn.set(f"k{i}", b"v")
        with pytest.raises(TooManyKeys):
            txn.set("k4", b"v")
        assert txn.get("k4") is None
        txn.set("k0", b"replaced")  # the transaction stays usable
        with pytest.raises(SessionQuotaExceeded):
            txn.set("k1", b"x" * 400)
        assert txn.get("k1") == b"v"
    assert store.keys(S1) == ["k0", "k1", "k2", "k3"]
    assert store.get(S1, "k0") == b"replaced"


def test_quota_checked_again_at_commit(make_store: StoreFactory) -> None:
    store = make_store(SMALL)
    first, second = store.begin("p", "s1"), store.begin("p", "s1")
    first.set("a", b"x" * 250)
    second.set("b", b"x" * 250)  # fine on its own
    second.set("c", b"c")
    first.commit()
    with pytest.raises(SessionQuotaExceeded):
        second.commit()  # all or nothing: "c" is not written either
    assert store.keys(S1) == ["a"]


def test_cas(make_store: StoreFactory) -> None:
    store = make_store()
    store.cas(S1, "k", None, b"1")  # None: must be absent
    with pytest.raises(CasConflict) as exc:
        store.cas(S1, "k", None, b"2")
    assert exc.value.code == "conflict"
    with pytest.raises(CasConflict):
        store.cas(S1, "k", b"0", b"2")
    store.cas(S1, "k", b"1", b"2")
    assert store.get(S1, "k") == b"2"
    store.cas(S1, "k", b"2", None)  # None: delete
    assert store.get(S1, "k") is None
    assert store.stats().conflicts == 0  # checked before commit


def test_cas_sees_an_expired_entry_as_absent(make_store: StoreFactory,
                                             clock: FakeClock) -> None:
    store = make_store(SMALL, clock)
    store.set(S1, "k", b"old", ttl=2)
    with pytest.raises(CasConflict):
        store.cas(S1, "k", None, b"new")  # still there
    clock.advance(3)
    with pytest.raises(CasConflict):
        store.cas(S1, "k", b"old", b"new")  # expired: it holds nothing
    store.cas(S1, "k", None, b"new", ttl=60)
    assert store.get(S1, "k") == b"new"
    assert store.usage(S1).scope_keys == 1
    with pytest.raises(QuotaExceeded):
        store.cas(S1, "k", b"new", b"x" * 10_000)  # the quotas hold for a one-shot cas
    assert store.get(S1, "k") == b"new"
    assert store.stats().conflicts == 0  # a comparison that failed is no commit conflict


def test_cas_precondition_is_rechecked_at_commit(make_store: StoreFactory) -> None:
    store = make_store()
    store.set(S1, "k", b"1")
    txn = store.begin("p", "s1")
    txn.cas("k", b"1", b"2")
    txn.set("other", b"x")
    txn.cas("k", b"2", b"3")  # against its own pending write: no new precondition
    store.set(S1, "k", b"changed")  # another call commits first
    with pytest.raises(CasConflict):
        txn.commit()
    assert snapshot(store) == [("p", "s1", "k", b"changed")]
    assert store.stats().conflicts == 1


def test_concurrent_cas_counter_across_two_store_objects(make_store: StoreFactory,
                                                         backend: str) -> None:
    a = make_store(clock=None)
    b = a if backend == "memory" else make_store(clock=None)  # two "hosts"
    a.set(G, "n", b"0")
    done = [0, 0]

    def worker(store: object, slot: int) -> None:
        while done[slot] < 25:
            with store.begin("p") as txn:  # type: ignore[attr-defined]
                current = txn.get("n", scope="plugin")
                try:
                    txn.cas("n", current, b"%d" % (int(current) + 1), scope="plugin")
                    txn.commit()
                except CasConflict:
                    continue
            done[slot] += 1

    threads = [threading.Thread(target=worker, args=(s, i)) for i, s in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert a.get(G, "n") == b"50"


# -- export and import ----------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["msgpack", "json"])
def test_export_import_round_trip(make_store: StoreFactory, clock: FakeClock, fmt: str) -> None:
    store = make_store(clock=clock)
    store.set(S1, "a", bytes(range(256)), ttl=100)
    store.set(G, "é", b"")
    store.set(Q1, "z", msgpack.packb([1, {"x": None}]))
    data = store.export_state(fmt)  # type: ignore[arg-type]
    target = MemoryStore(clock=clock)
    assert target.import_state(data, fmt) == 3  # type: ignore[arg-type]
    assert target.records() == store.records()
    assert target.records()[1].expires_at == pytest.approx(clock.now + 100)
    clock.advance(101)
    assert target.get(S1, "a") is None
    # and back into this backend, replacing the state of the plugins it names
    store.set(Scope("p", "s9"), "gone", b"1")
    store.set(Scope("r", "s"), "kept", b"1")
    target.delete(Q1, "z")
    assert store.import_state(target.export_state(fmt), fmt, replace=True) == 1  # type: ignore[arg-type]
    assert snapshot(store) == [*snapshot(target), ("q", "s1", "z", msgpack.packb([1, {"x": None}])),
                               ("r", "s", "kept", b"1")]


def test_import_skips_expired_and_refuses_garbage(make_store: StoreFactory,
                                                  clock: FakeClock) -> None:
    store = make_store(clock=clock)
    records = [Record("p", "s1", "live", b"1", clock.now + 5, 5.0),
               Record("p", "s1", "dead", b"2", clock.now - 1, 5.0)]
    assert store.load(records) == 1
    assert store.keys(S1) == ["live"]
    for data in [b"\xc1", b"[1]", b'{"format": "other", "version": 1, "records": []}']:
        with pytest.raises(InvalidArgument):
            store.import_state(data, "json" if data.startswith((b"[", b"{")) else "msgpack")
    with pytest.raises(InvalidArgument):
        store.import_state(b'[{"plugin": "p", "session": null, "key": "k", "value": "!!",'
                           b' "expires_at": 1}]', "json")


def test_errors_are_wasmext_errors() -> None:
    for cls, code in [(StateError, "internal"), (QuotaExceeded, "limit"),
                      (TooManyKeys, "limit"), (KeyTooLong, "limit"),
                      (SessionQuotaExceeded, "limit"), (CasConflict, "conflict"),
                      (InvalidKey, "invalid"), (InvalidArgument, "invalid")]:
        assert issubclass(cls, WasmextError)
        assert cls.code == code


def test_a_commit_under_an_applied_key_applies_nothing(make_store: StoreFactory,
                                                       clock: FakeClock, backend: str) -> None:
    first = make_store(clock=clock)
    # Two workers on one store (a memory store is shared by being the same object).
    second = first if backend == "memory" else make_store(clock=clock)
    plugin = Scope("p")

    def attempt(store: Any, value: bytes, key: str) -> Any:
        txn = store.begin("p")
        txn.set("n", value, scope="plugin")
        txn.once(key, 60)
        return txn

    assert attempt(first, b"1", "call-1").commit().duplicate is False
    assert attempt(second, b"2", "call-1").commit().duplicate is True  # the retry
    assert first.get(plugin, "n") == b"1"
    # Two attempts of one call racing (a frozen worker thawing beside the retry):
    # one commit lands, the other applies nothing.
    a, b = attempt(first, b"3", "call-2"), attempt(second, b"4", "call-2")
    assert a.commit().duplicate is False and b.commit().duplicate is True
    assert second.get(plugin, "n") == b"3"
    # The keys are not the plugin's: not listed, not cleared by it.
    assert first.keys(plugin) == ["n"]
    assert first.clear(plugin) == 1
    assert attempt(first, b"5", "call-2").commit().duplicate is True
    # A conflict of the plugin's own compare-and-set is still one.
    txn = first.begin("p")
    txn.cas("m", None, b"x", scope="plugin")
    txn.once("call-3", 60)
    first.set(plugin, "m", b"taken")
    with pytest.raises(CasConflict):
        txn.commit()
    clock.advance(61)  # remembered for its TTL only
    assert attempt(second, b"6", "call-1").commit().duplicate is False
    assert first.get(plugin, "n") == b"6"
