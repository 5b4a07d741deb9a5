"""Output extensions as reference 003's users know them, with the text-tags plugin
(C: `#wordcount`, `#shout`): per-user activations kept in the state store, several
activations of one extension with default params, every earlier result in
`previous`, output targets and metadata, the start/result/results/usage events,
and a turn's results saved with the turn and read back after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime

from support import Built
from wasmext import ActivationError, Host, Runtime
from wasmext.config import HostConfig
from wasmext.testing import guest_wat


def new_host(built: Built, data_dir: Path | None = None, **limits: Any) -> Host:
    config = HostConfig(state_backend="sqlite", data_dir=data_dir, state_limits=limits) \
        if data_dir else HostConfig(state_backend="memory", state_limits=limits)
    host = Host(config, runtime=Runtime(cache=False), plugin_dirs=[])
    host.add(built["text-tags"], plugin_id="text-tags")
    return host


def run(host: Host, user: str | None, query: str, answer: str = "one two three",
        session_id: str = "s1", turn_id: str | None = None) -> list[dict[str, Any]]:
    with host.session(session_id) as s:
        s.user_id = user
        s.context["turn_id"] = turn_id
        _, results = s.output_extensions(query, answer)
    return [r.as_dict() for r in results]


def test_each_user_runs_only_their_own_activations(built: Built, tmp_path: Path) -> None:
    with new_host(built, tmp_path) as host:
        host.extensions.activate("alice", "wordcount")
        host.extensions.activate("bob", "shout")
        alice = run(host, "alice", "go #wordcount #shout")
        bob = run(host, "bob", "go #wordcount #shout")
        nobody = run(host, None, "go #wordcount #shout")
    assert [(r["name"], r["success"]) for r in alice] == [("wordcount", True), ("shout", False)]
    assert alice[0]["content"] == {"words": 3, "chars": 13, "previous": []}
    assert alice[1]["error"] == "no output extension #shout" and alice[1]["plugin"] is None
    assert [(r["name"], r["success"]) for r in bob] == [("wordcount", False), ("shout", True)]
    # a session without a user may ask for every served extension, as itself
    assert [(r["name"], r["success"]) for r in nobody] == [("wordcount", True), ("shout", True)]
    with new_host(built) as plain, plain.session("s9", user_id="alice") as s:
        s.context["tenant_id"] = "acme"  # a routing tenant is not a user: no effect here
        assert "alice" not in repr(s.hook_context("turn"))  # plugins are not told
        s.user_id = None
        _, results = s.output_extensions("#wordcount", "x")
        assert results[0].success
    # the activations live in the store: another host on the same data_dir sees them
    with new_host(built, tmp_path) as again:
        assert [a.name for a in again.extensions.list("alice")] == ["wordcount"]
        assert [a.name for a in again.extensions.list("bob")] == ["shout"]
        assert run(again, "alice", "#wordcount")[0]["success"]


def test_several_activations_of_one_extension_with_default_params(built: Built) -> None:
    with new_host(built) as host:
        first = host.extensions.activate("alice", "wordcount", default_param="brief")
        second = host.extensions.activate("alice", "wordcount")
        third = host.extensions.activate("alice", "wordcount", name="wc", default_param="full")
        assert (first.name, second.name, third.name) == ("wordcount", "wordcount2", "wc")
        results = run(host, "alice", "count #wordcount #wordcount2 #wc #wordcount:full")
        with pytest.raises(ActivationError, match=r"already has an activation named 'wc'"):
            host.extensions.activate("alice", "wordcount", name="wc")  # taken and active
        with pytest.raises(ActivationError, match="no loaded plugin serves"):
            host.extensions.activate("alice", "nosuch")
        with pytest.raises(ActivationError, match="default_param"):
            host.extensions.activate("alice", "shout", default_param="a b")
        host.extensions.deactivate("alice", "wordcount2")
        after = run(host, "alice", "#wordcount2 #wc")
        assert [a.name for a in host.extensions.list("alice")] == ["wc", "wordcount"]
    # the default param applies when the query names none; the query's wins
    assert [(r["name"], r["extension"], r["param"]) for r in results] == [
        ("wordcount", "wordcount", "brief"), ("wordcount2", "wordcount", None),
        ("wc", "wordcount", "full"), ("wordcount", "wordcount", "full")]
    assert results[0]["content"] == 3  # brief: the number of words
    assert [r["metadata"]["param_from"] for r in results] == [
        "activation", None, "activation", "query"]
    # previous keeps every earlier result, the repeated name too
    assert results[3]["content"]["previous"] == ["wordcount", "wordcount2", "wc"]
    assert [(r["name"], r["success"]) for r in after] == [("wordcount2", False), ("wc", True)]


def test_events_targets_and_the_turns_usage(built: Built) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    with new_host(built) as host:
        host.observe.bus.subscribe("extension.*", lambda e: events.append((e.topic, e.payload)))
        results = run(host, None, "#shout #nosuch #wordcount:brief", turn_id="turn-7")
        assert host.observe.bus.flush(5)
    assert [t for t, _ in events] == [
        "extension.start", "extension.result", "extension.start", "extension.result",
        "extension.start", "extension.result", "extension.results", "extension.usage"]
    assert events[0][1]["name"] == "shout" and events[0][1]["turn_id"] == "turn-7"
    assert [p["success"] for t, p in events if t == "extension.result"] == [True, False, True]
    assert events[6][1]["results"] == results
    assert events[7][1] | {"timestamp": 0} == {
        "session_id": "s1", "turn_id": "turn-7", "input_tokens": 0, "output_tokens": 0,
        "cost": 0.0, "count": 3, "turn_input_tokens": 0, "turn_output_tokens": 0,
        "timestamp": 0}
    assert {r["output_target"] for r in results} == {"silent"}  # text-tags declares none
    assert results[0]["metadata"]["execution_time_ms"] == results[0]["duration_ms"] > 0


def _declaring(targets: dict[str, str]) -> bytes:
    reg = {"hooks": [{"hook": "output_extension", "pattern": n} for n in targets],
           "output_extensions": [{"name": n, "output_target": t} for n, t in targets.items()]}
    return bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "done"},
                                             registration=reg)))


def test_declared_output_targets_are_carried_and_checked() -> None:
    host = Host(HostConfig(state_backend="memory"), runtime=Runtime(cache=False),
                plugin_dirs=[])
    with host:
        host.add(_declaring({"chat": "chat_append", "panel": "status_panel",
                             "bad": "\x1b[2Jeverywhere"}), plugin_id="targets")
        results = run(host, None, "#chat #panel #bad")
    assert [(r["output_target"], r["success"]) for r in results] == [
        ("chat_append", True), ("status_panel", True), ("silent", False)]
    assert "not one of silent, chat_append, status_panel" in results[2]["error"]
    assert "\x1b" not in results[2]["error"]


def test_a_turns_results_are_saved_and_read_back_after_a_restart(built: Built,
                                                                  tmp_path: Path) -> None:
    with new_host(built, tmp_path) as host:
        host.extensions.activate("alice", "wordcount", default_param="brief")
        run(host, "alice", "first #wordcount", "a b", turn_id="turn-0")
        run(host, "alice", "second #wordcount #wordcount", "a b c", turn_id="turn-1")
        run(host, "alice", "no extensions here", turn_id="turn-2")
    with new_host(built, tmp_path) as reloaded:
        history = reloaded.extensions.history("s1")
        assert reloaded.extensions.history("another-session") == []
    assert [t["turn_id"] for t in history] == ["turn-0", "turn-1"]
    assert history[0]["query"] == "first #wordcount" and history[0]["user_id"] == "alice"
    assert [r["content"] for r in history[0]["results"]] == [2]
    assert [r["content"] for r in history[1]["results"]] == [3, 3]  # both kept
    assert [e["type"] for e in history[1]["events"]] == [
        "extension.start", "extension.result", "extension.start", "extension.result",
        "extension.results", "extension.usage"]
    assert history[1]["usage"]["count"] == 2


def test_a_store_that_refuses_the_record_leaves_the_results_intact(built: Built) -> None:
    with new_host(built, max_plugin_bytes=64 * 1024) as host:
        answer = "word " * 20_000  # the turn's record is over the store's per-scope quota
        host.extensions.activate("alice", "shout")
        with host.session("s1") as s:
            s.user_id = "alice"
            s.context["turn_id"] = "turn-0"
            _, results = s.output_extensions("#shout", answer)
            notes = [e.detail or "" for e in s.trace.events if e.outcome == "failed"]
        assert results[0].success and len(results[0].content["text"]) == len(answer)
        assert any("not saved" in n for n in notes)
        assert host.extensions.history("s1") == []
        assert run(host, "alice", "#shout", "hi")[0]["content"]["text"] == "HI"  # healthy
        # an answer over the plugin's input cap fails that result alone
        with host.session("s2") as s2:
            _, (big,) = s2.output_extensions("#shout", "x" * (2 << 20))
        assert not big.success and "max_input_bytes" in (big.error or "")


def test_activation_records_are_checked(built: Built) -> None:
    with new_host(built) as host:
        for bad in ("", "Upper", "x" * 65, "a b", "#json"):
            with pytest.raises(ActivationError):
                host.extensions.activate("alice", "wordcount", name=bad)
        with pytest.raises(ActivationError, match="owner"):
            host.extensions.activate("u" * 300, "wordcount")
        # a damaged record in the store is not an activation and breaks nothing
        store = host.state_store()
        from wasmext.state import Scope

        store.set(Scope("@ext-activations/alice"), "junk", b"\xc1")
        store.set(Scope("@ext-activations/alice"), "half", msgpack.packb({"name": "half"}))
        host.extensions.activate("alice", "shout")
        assert [a.name for a in host.extensions.list("alice")] == ["shout"]


def test_prefix_patterns_serve_any_matching_name(built: Built) -> None:
    reg = {"hooks": [{"hook": "output_extension", "pattern": "tool_*"}]}
    wasm = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "seen"},
                                             registration=reg)))
    with new_host(built) as host:
        host.add(wasm, plugin_id="prefixed")
        anyone = run(host, None, "#tool_a #tool_b:x #tooling")
        host.extensions.activate("alice", "tool_a", name="ta", default_param="p")
        alice = run(host, "alice", "#ta #tool_b")
    assert [(r["name"], r["success"], r["content"]) for r in anyone] == [
        ("tool_a", True, "seen"), ("tool_b", True, "seen"), ("tooling", False, None)]
    assert [(r["name"], r["extension"], r["param"], r["success"]) for r in alice] == [
        ("ta", "tool_a", "p", True), ("tool_b", "tool_b", None, False)]
