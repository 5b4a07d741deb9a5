"""An import is one atomic unit on every backend (the kill -9 loops are in
test_state_cli_crash.py): a refused plugin leaves every plugin as it was."""

from __future__ import annotations

import pytest
from state_support import FakeClock, StoreFactory

from wasmext.state import QuotaExceeded, Record, Scope, StateLimits


def snapshot(store: object) -> list[tuple[str, str | None, str, bytes]]:
    return [(r.plugin, r.session, r.key, r.value) for r in store.records()]  # type: ignore[attr-defined]


def records(plugin: str, n: int, tag: bytes, now: float) -> list[Record]:
    return [Record(plugin, "s" if i % 2 else None, f"k{i}", tag + b"%d" % i, now + 3600, 3600.0)
            for i in range(n)]


@pytest.mark.parametrize("replace", [False, True])
def test_a_refused_plugin_changes_nothing(make_store: StoreFactory, clock: FakeClock,
                                          replace: bool) -> None:
    store = make_store(limits=StateLimits(max_keys=10), clock=clock)
    store.load(records("a", 6, b"old", clock.now) + records("b", 6, b"old", clock.now))
    before = snapshot(store)
    # "a" fits, "z" would hold 30 keys per scope: the whole import is refused
    with pytest.raises(QuotaExceeded):
        store.load(records("a", 4, b"new", clock.now) + records("z", 60, b"new", clock.now),
                   replace=replace)
    assert snapshot(store) == before


def test_replace_and_merge(make_store: StoreFactory, clock: FakeClock) -> None:
    store = make_store(clock=clock)
    store.load(records("a", 6, b"old", clock.now) + records("b", 2, b"old", clock.now))
    assert store.load(records("a", 2, b"new", clock.now), replace=True) == 2
    assert snapshot(store) == sorted(
        [(r.plugin, r.session, r.key, r.value) for r in
         records("a", 2, b"new", clock.now) + records("b", 2, b"old", clock.now)],
        key=lambda t: (t[0], t[1] is not None, t[1] or "", t[2]))
    store.load([Record("a", None, "extra", b"x", clock.now + 60, 60.0)])  # merge
    assert store.get(Scope("a"), "extra") == b"x" and store.get(Scope("a"), "k0") == b"new0"
    u = store.usage(Scope("a"))
    assert (u.scope_keys, u.scope_bytes) == (
        2, sum(store.limits.entry_size(k, v) for k, v in [("k0", b"new0"), ("extra", b"x")]))


def test_redis_cleans_what_a_killed_import_staged(make_store: StoreFactory, clock: FakeClock,
                                                  backend: str) -> None:
    if backend != "redis":
        pytest.skip("staging keys are Redis's")
    store = make_store(clock=clock)
    store.load(records("a", 4, b"old", clock.now))
    r, staging = store._r, store._staging  # type: ignore[attr-defined]
    # what a kill between staging and the swap leaves behind
    stage = store._k("a").base + b"stage:dead:"  # type: ignore[attr-defined]
    r.sadd(staging, stage)
    r.set(stage + b"v:g:k0", b"junk")
    r.hset(stage + b"usage", b"total", 1)
    assert len(snapshot(store)) == 4  # staged keys are invisible
    store.load(records("a", 2, b"new", clock.now), replace=True)
    assert r.smembers(staging) == set()
    prefix = store._prefix  # type: ignore[attr-defined]
    assert list(r.scan_iter(match=prefix + b"*stage:*")) == []
    assert store.get(Scope("a"), "k0") == b"new0"
