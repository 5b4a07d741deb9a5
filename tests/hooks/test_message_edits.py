"""Turn middleware editing the conversation with message events (hooks.messages)."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
import wasmtime
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmext.hooks.messages import apply_message_events, new_message, wire
from wasmext.sandbox.hostcalls import OpError
from wasmext.testing import DATA_AT, guest_wat, make_host

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
CONVERSATION = [{"role": "user", "content": f"m{i}"} for i in range(4)]


def editor(events: Any, kind: str = "turn") -> bytes:
    """A `kind` middleware layer: next with these message events, then unchanged.
    A refused next is retried without events, so the turn still runs."""
    edit = msgpack.packb({"op": "next", "message_events": events})
    plain = msgpack.packb({"op": "next"})
    at2 = DATA_AT + len(edit)
    # The answer of next is {"ok": bool, ...}: its byte 4 is msgpack true (0xc3) when
    # the edits were taken; only a refused next is tried again (twice is a broken layer).
    body = f"""(local $r i64)
    (local.set $r (call $host_call (i32.const {DATA_AT}) (i32.const {len(edit)})))
    (if (i32.ne (i32.load8_u offset=4 (i32.wrap_i64 (i64.shr_u (local.get $r) (i64.const 32))))
                (i32.const 0xc3))
      (then (drop (call $host_call (i32.const {at2}) (i32.const {len(plain)})))))
    (i64.const 0)"""
    wat = guest_wat(body, imports=HOST_CALL, data=edit + plain,
                    registration={"hooks": [{"hook": kind}], "abi_minor": 1})
    return bytes(wasmtime.wat2wasm(wat))


def run_turn(events: Any, conversation: list[Any] | None = None
             ) -> tuple[list[Any], list[tuple[str, str | None]]]:
    seen: list[Any] = []

    def core(d: dict[str, Any]) -> dict[str, Any]:
        seen.append(d["messages"])
        return {"response": "ok", "finish_reason": "text_response"}

    with make_host((editor(events), {"plugin_id": "editor"})) as host, host.session() as s:
        s.middleware("turn", {"turn_id": "t0", "messages": list(
            CONVERSATION if conversation is None else conversation), "metadata": {}}, core)
        notes = [(e.outcome, e.detail) for e in s.trace.events if e.plugin_id == "editor"]
    return seen, notes


def test_events_apply_in_order_and_are_traced() -> None:
    seen, notes = run_turn([
        {"type": "truncate", "keep": 3},
        {"type": "remove", "index": 0},
        {"type": "replace", "index": 0, "message": {"role": "user", "content": "edited"}},
        {"type": "append", "message": {"role": "system", "content": "be brief"}},
    ])
    assert [[wire(m) for m in ms] for ms in seen] == [
        [{"role": "user", "content": "edited"}, {"role": "user", "content": "m3"},
         {"role": "system", "content": "be brief"}]]
    added = seen[0][2]
    assert added["source"] == {"type": "extension", "extension_name": "editor"}
    assert added["id"].startswith("msg-") and added["created_at"].endswith("+00:00")
    assert [d for o, d in notes if o == "messages"] == [
        "truncate: 1 message(s) dropped, 3 kept", "remove message #0", "replace message #0",
        "append system message #2"]


def test_the_seeds_bare_truncate_clears_the_conversation() -> None:
    seen, notes = run_turn([{"type": "truncate"},
                            {"type": "append", "message": {"role": "user", "content": "new"}}])
    assert [[wire(m) for m in ms] for ms in seen] == [[{"role": "user", "content": "new"}]]
    assert [d for o, d in notes if o == "messages"] == [
        "truncate: 4 message(s) dropped, 0 kept", "append user message #0"]


def test_truncate_at_a_target_keeps_that_message_and_those_after_it() -> None:
    conversation = [new_message("user", f"m{i}", {"type": "user"}) for i in range(4)]
    seen, notes = run_turn([{"type": "truncate", "target_id": conversation[2]["id"]}],
                           conversation)
    assert seen == [conversation[2:]]
    assert ("messages", "truncate: 2 message(s) dropped, 2 kept") in notes
    unknown, _ = run_turn([{"type": "truncate", "target_id": "msg-nope"}], conversation)
    assert unknown == [conversation]  # refused as a whole: nothing dropped


@pytest.mark.parametrize("events", [
    [{"type": "remove", "index": 9}],
    [{"type": "append", "message": {"role": "god", "content": "x"}}],
    [{"type": "append", "message": {"role": "user", "content": "x"}}, {"type": "explode"}],
    "not a list",
    [{"type": "truncate", "keep": -1}],
])
def test_a_bad_event_refuses_the_whole_list(events: Any) -> None:
    seen, notes = run_turn(events)
    assert seen == [CONVERSATION]  # untouched; the plain next ran the turn
    assert not [n for n in notes if n[0] == "messages"]


def test_only_turn_middleware_edits_messages() -> None:
    seen: list[Any] = []
    with make_host((editor([{"type": "truncate"}], "step"), {"plugin_id": "editor"})) as host, \
            host.session() as s:
        s.middleware("step", {"messages": list(CONVERSATION), "metadata": {}, "tools": []},
                     lambda d: seen.append(d["messages"]) or {"response": "ok"})
    assert seen == [CONVERSATION]


message = st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "x"]),
                                 "content": st.text(max_size=5)})
event = st.one_of(
    st.fixed_dictionaries({"type": st.just("append"), "message": message}),
    st.fixed_dictionaries({"type": st.just("replace"), "index": st.integers(-2, 6),
                           "message": message}),
    st.fixed_dictionaries({"type": st.just("remove"), "index": st.integers(-2, 6)}),
    st.fixed_dictionaries({"type": st.just("truncate"), "keep": st.integers(-1, 6)}),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.lists(event, max_size=8))
def test_any_event_list_applies_or_is_invalid(events: list[Any]) -> None:
    try:
        out, notes = apply_message_events(CONVERSATION, events)
    except OpError as err:
        code = err.code
    else:
        code = "ok"
        assert len(notes) == len(events)
        assert all(m["role"] in ("user", "system") for m in out)
    assert code in ("ok", "invalid")


def test_edits_address_messages_by_id_and_a_replaced_message_keeps_its_id() -> None:
    conversation = [new_message("user", f"m{i}", {"type": "user"}) for i in range(3)]
    first, second, third = (m["id"] for m in conversation)
    out, notes = apply_message_events(conversation, [
        {"type": "replace", "target_id": second,
         "message": {"role": "user", "content": "edited"}},
        {"type": "remove", "target_id": first}], editor="trimmer")
    assert [(m["id"], m["content"]) for m in out] == [(second, "edited"), (third, "m2")]
    assert notes == ["replace message #1", "remove message #0"]
    assert out[0]["source"] == {"type": "extension", "extension_name": "trimmer"}
    with pytest.raises(OpError, match="no message with id"):
        apply_message_events(conversation, [{"type": "remove", "target_id": "msg-nope"}])
