"""The state ops from real guests: one transaction per hook call, committed on
success, rolled back on a fault or an error answer; scopes and quotas."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from wasmext import HostConfig, PluginError
from wasmext.testing import host_calls_wat, make_host


def requester(*requests: dict[str, Any], then: str = "") -> str:
    """A guest that sends each request in turn and answers with the last answer, or
    sends all of them and then runs `then` (a trap, say)."""
    return host_calls_wat(*requests, then=then)


def host_with(*plugins: tuple[str, dict[str, Any]], tmp: Any) -> Any:
    return make_host(*plugins, config=HostConfig(data_dir=tmp, state_backend="memory"))


def call(host: Any, pid: str, session: str) -> Any:
    return host.plugins[pid].plugin.call("test", None, {"session": session})


def test_set_then_get_across_calls_and_scopes(tmp_path: Any) -> None:
    host = host_with(
        (requester({"op": "state.set", "key": "k", "value": {"n": [1, 2.5, "x", b"\0"]}}),
         {"plugin_id": "writer", "grants": {"state"}}),
        (requester({"op": "state.get", "key": "k"}), {"plugin_id": "writer2",
                                                       "grants": {"state"}}),
        tmp=tmp_path)
    call(host, "writer", "s1")
    # Another plugin has its own state: the same key is not there.
    with pytest.raises(PluginError) as info:
        call(host, "writer2", "s1")
    assert info.value.code == "not_found"
    store = host.state_store()
    from wasmext.state import Scope

    assert msgpack.unpackb(store.get(Scope("writer", "s1"), "k")) == {"n": [1, 2.5, "x", b"\0"]}
    assert store.get(Scope("writer", "s2"), "k") is None


def test_a_faulting_call_rolls_its_writes_back(tmp_path: Any) -> None:
    set_then_trap = requester({"op": "state.set", "key": "k", "value": 1}, then="unreachable")
    host = host_with((set_then_trap, {"plugin_id": "trapper", "grants": {"state"}}),
                     tmp=tmp_path)
    with pytest.raises(Exception, match="unreachable"):
        call(host, "trapper", "s1")
    from wasmext.state import Scope

    assert host.state_store().get(Scope("trapper", "s1"), "k") is None


def test_error_answers_roll_back_too(tmp_path: Any) -> None:
    reqs = [{"op": "state.set", "key": "k", "value": 1}, {"op": "no.such.op"}]
    host = host_with((requester(*reqs), {"plugin_id": "p", "grants": {"state"}}), tmp=tmp_path)
    with pytest.raises(PluginError):
        call(host, "p", "s1")
    from wasmext.state import Scope

    assert host.state_store().get(Scope("p", "s1"), "k") is None


def test_cas_conflict_and_quota_errors_are_answers(tmp_path: Any) -> None:
    host = host_with(
        (requester({"op": "state.cas", "key": "k", "expected": 5, "value": 6}),
         {"plugin_id": "cas", "grants": {"state"}}),
        (requester({"op": "state.set", "key": "x" * 1000, "value": 1}),
         {"plugin_id": "long", "grants": {"state"}}),
        (requester({"op": "state.set", "key": "k", "value": 1}), {"plugin_id": "nogrant"}),
        tmp=tmp_path)
    for pid, code in (("cas", "conflict"), ("long", "limit"), ("nogrant", "denied")):
        with pytest.raises(PluginError) as info:
            call(host, pid, "s1")
        assert info.value.code == code, pid


def test_session_end_clears_its_state(tmp_path: Any) -> None:
    host = host_with((requester({"op": "state.set", "key": "k", "value": 1}),
                      {"plugin_id": "p", "grants": {"state"}}), tmp=tmp_path)
    from wasmext.state import Scope

    with host.session("s9") as s:
        host.plugins["p"].plugin.call("test", None, {"session": s.id})
        assert host.state_store().get(Scope("p", "s9"), "k") is not None
    assert host.state_store().get(Scope("p", "s9"), "k") is None


def test_state_metrics(tmp_path: Any) -> None:
    host = host_with((requester({"op": "state.set", "key": "k", "value": "v" * 100}),
                      {"plugin_id": "p", "grants": {"state"}}), tmp=tmp_path)
    call(host, "p", "s1")
    stats = host.observe.metrics.snapshot()["p"]
    assert stats["state_bytes"] > 100
    assert stats["host_calls"] == 1
    text = host.observe.metrics.exposition().decode()
    assert 'extension_state_operations_total{extension_id="p",operation="set"} 1.0' in text


def test_a_refused_commit_fails_the_call(tmp_path: Any) -> None:
    """Two calls race on one key with CAS: the loser's call fails; no write is lost."""
    from wasmext.state import Scope

    host = host_with((requester({"op": "state.cas", "key": "k", "value": 1}),
                      {"plugin_id": "p", "grants": {"state"}}), tmp=tmp_path)
    store = host.state_store()
    original_begin = store.begin

    raced: list[bool] = []

    def racing_begin(plugin_id: str, session_id: str | None = None) -> Any:
        txn = original_begin(plugin_id, session_id)
        if raced:  # the rival's own write: no race inside the race
            return txn
        raced.append(True)
        commit = txn.commit

        def commit_after_a_rival() -> Any:
            store.set(Scope("p", "s1"), "k", msgpack.packb(99))  # another host wins the race
            return commit()

        txn.commit = commit_after_a_rival  # type: ignore[method-assign]
        return txn

    store.begin = racing_begin  # type: ignore[method-assign]
    with pytest.raises(PluginError) as info:
        call(host, "p", "s1")
    assert info.value.code == "conflict"
    assert msgpack.unpackb(store.get(Scope("p", "s1"), "k")) == 99
