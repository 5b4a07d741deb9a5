"""The worker's stage call in-process (`cluster.stagecall.call_stage`): its state commit
applies once per key whether the request's idempotency record rides its root frame (a
deadline or calls-left header: the usual request) or `applying` (neither); a nested
call is never covered; a request that is not the contract and an answer that is not
one are refused as before the fast paths."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import wasmtime
from test_delivery import count, tally_config

from wasmext import ContractError, Host, HostConfig, load_config
from wasmext.cluster.contract import (
    CALL_ID_HEADER,
    CALLS_LEFT_HEADER,
    DEADLINE_HEADER,
    JSON,
    MAX_BYTES,
    MSGPACK,
    ExtMessage,
    ExtRef,
    ExtRequest,
    deadline_of,
    encode,
)
from wasmext.cluster.endpoints import Stage
from wasmext.cluster.stagecall import Budget, call_stage
from wasmext.runtime import Runtime
from wasmext.sandbox import calltree
from wasmext.services import state
from wasmext.state import Scope
from wasmext.testing import guest_wat


def _request(payload: str = "hi") -> ExtRequest:
    return ExtRequest("t" * 32, "default", ExtRef("x", {}),
                      ExtMessage("m1", "chat", payload, {}), {})


@pytest.fixture
def tally(tmp_path: Path) -> Iterator[Host]:
    with Host(load_config(tally_config(tmp_path, backend="memory")),
              runtime=Runtime(cache=False)) as host:
        host.state_store().set(Scope("tally"), "n", msgspec.msgpack.encode(0))
        yield host


@pytest.mark.parametrize("framed", [True, False], ids=["root-frame", "applying"])
def test_a_stage_commits_once_per_key(tally: Host, framed: bool) -> None:
    stage = Stage("tally", "pre", "w.ext.pre.tally.v1")
    body = encode(_request(), JSON)

    def headers(key: str) -> dict[str, str]:
        sent = {CALL_ID_HEADER: key}
        if framed:  # what a RemoteCaller sends: the record rides the root frame
            sent[DEADLINE_HEADER] = str(int((time.time() + 30) * 1000))
            sent[CALLS_LEFT_HEADER] = "50"
        return sent

    store = tally.state_store()
    first, duplicate = call_stage(tally, stage, body, JSON, Budget(headers("k1")), "w")
    assert first is not None and b'"tallied"' in first and not duplicate
    assert count(store) == 1
    again, duplicate = call_stage(tally, stage, body, JSON, Budget(headers("k1")), "w")
    assert again == first and duplicate  # answered, not applied again
    assert count(store) == 1
    _, duplicate = call_stage(tally, stage, body, JSON, Budget(headers("k2")), "w")
    assert not duplicate and count(store) == 2
    _, duplicate = call_stage(tally, stage, body, JSON, Budget(None), "w")  # no key at all
    assert not duplicate and count(store) == 3
    assert calltree.current() is None  # every frame pushed was popped


def test_only_the_call_a_root_frame_roots_is_covered_by_its_record() -> None:
    root = calltree.Frame(time.monotonic() + 10, 100, None)
    root.once = once = state.Once("key", root)
    calltree.push(root)
    try:
        call = calltree.enter(time.monotonic(), 1.0, 10)
        try:
            assert state._covering_once() is once  # the stage's own plugin call
            nested = calltree.enter(time.monotonic(), 1.0, 10)
            try:
                assert state._covering_once() is None  # a call it makes (a tool's plugin)
            finally:
                calltree.leave(nested)
        finally:
            calltree.leave(call)
    finally:
        calltree.pop()
    with state.applying("other") as held:  # no root frame: the context variable
        call = calltree.enter(time.monotonic(), 1.0, 10)
        try:
            assert state._covering_once() is held
        finally:
            calltree.leave(call)


def _answering(tmp_path: Path, value: object) -> Host:
    folder = tmp_path / "plugins" / "odd"
    folder.mkdir(parents=True)
    wat = guest_wat(response={"ok": True, "value": value},
                    registration={"hooks": [{"hook": "pre"}], "name": "odd"})
    (folder / "plugin.toml").write_text('id = "odd"\nversion = "1.0.0"\nabi = 1\n')
    (folder / "odd.wasm").write_bytes(bytes(wasmtime.wat2wasm(wat)))
    return Host(HostConfig(), runtime=Runtime(cache=False),
                plugin_dirs=[("workspace", folder.parent)])


def test_requests_that_are_not_the_contract_are_refused_by_name(tmp_path: Path) -> None:
    stage = Stage("odd", "pre", "w.ext.pre.odd.v1")
    with _answering(tmp_path, {"message": {"payload": "ok"}}) as host:
        budget = Budget(None)
        unknown = encode(_request(), JSON).replace(b'"context":{}', b'"context":{},"x":1')
        with pytest.raises(ContractError, match=r"request for odd: not an ExtRequest: .*x"):
            call_stage(host, stage, unknown, JSON, budget, "w")
        with pytest.raises(ContractError, match="request for odd: not JSON"):
            call_stage(host, stage, b"{\xff", JSON, budget, "w")
        with pytest.raises(ContractError, match="request for odd: not MessagePack"):
            call_stage(host, stage, b"\xc1", MSGPACK, budget, "w")
        big = encode(_request("a" * MAX_BYTES), JSON)
        with pytest.raises(ContractError, match=f"of {len(big)} bytes is over {MAX_BYTES}"):
            call_stage(host, stage, big, JSON, budget, "w")
        deep = b'{"trace_id":"t","tenant_id":"d","extensions":{"id":"x"},' \
            b'"message":{"message_id":"m","message_type":"c","payload":"p","metadata":' + \
            b"[" * 100_000 + b"]" * 100_000 + b"}}"
        with pytest.raises(ContractError, match="request for odd"):
            call_stage(host, stage, deep, JSON, budget, "w")
        # ... and the plugin still answers a request that is one.
        body, _ = call_stage(host, stage, encode(_request(), JSON), JSON, budget, "w")
        assert body is not None and b'"payload":"ok"' in body


@pytest.mark.parametrize("value", [
    {"message": {"payload": 7}},  # not a string
    {"message": "stamped"},  # not a map
    ["message"],
])
def test_a_hostile_answer_is_refused(tmp_path: Path, value: object) -> None:
    stage = Stage("odd", "pre", "w.ext.pre.odd.v1")
    with _answering(tmp_path, value) as host:
        with pytest.raises(RuntimeError, match="invalid pre answer"):
            call_stage(host, stage, encode(_request(), JSON), JSON, Budget(None), "w")
        assert calltree.current() is None


def test_an_answer_is_mapped_with_the_requests_id_and_context_as_fallbacks() -> None:
    from wasmext.cluster.mapping import stage_response

    request = _request()
    request.context["kept"] = True
    out = stage_response(request, {"message": {"payload": "p"}}, True)
    assert out is not None and out.context == {"kept": True}
    assert (out.message.message_id, out.message.message_type, out.message.payload,
            out.message.metadata) == ("m1", "chat", "p", {})
    odd = {"message": {"payload": "q", "message_id": "", "message_type": 5,
                       "metadata": [1]}, "context": {"a": 1}}
    out = stage_response(request, odd, True)
    assert out is not None and out.context == {"a": 1}
    assert (out.message.message_id, out.message.message_type, out.message.metadata) == \
        ("m1", "5", {})
    unchanged = stage_response(request, None, False)
    assert unchanged is not None and unchanged.message is request.message


def test_a_budgets_key_is_the_session_id_of_the_call_id() -> None:
    from wasmext.cluster.stagecall import session_id

    for sent in ("ab12" * 8, "a" * 128, "a" * 129, "", "é" * 4, "٣٣", "a b", "a.b-c",
                 "\udc80x"):
        key = Budget({CALL_ID_HEADER: sent}).key
        assert key == session_id(sent)
        assert (key == sent) == (sent.isascii() and 0 < len(sent) <= 128 and
                                 all(c.isalnum() or c in "._:-" for c in sent))


@pytest.mark.parametrize("raw", ["", "12.5", "-1", "1e9", "\uff11\uff12", "1" * 17, "abc"])
def test_a_budget_reads_no_deadline_from_an_odd_header(raw: str) -> None:
    assert deadline_of({DEADLINE_HEADER: raw}) is None
    budget = Budget({DEADLINE_HEADER: raw})
    assert budget.deadline is None and not budget.late() and not budget.expired()


def test_a_budget_reads_the_deadline_as_deadline_of_does_and_knows_when_it_came_late(
        ) -> None:
    soon = str(int((time.time() + 5) * 1000))
    budget = Budget({DEADLINE_HEADER: soon, CALLS_LEFT_HEADER: "7"})
    expected = deadline_of({DEADLINE_HEADER: soon})
    assert budget.deadline is not None and expected is not None
    assert abs(budget.deadline - expected) < 0.05 and budget.calls_left == 7
    assert not budget.late() and not budget.expired()
    assert budget.arrived <= time.monotonic() < budget.deadline
    gone = Budget({DEADLINE_HEADER: str(int((time.time() - 1) * 1000))})
    assert gone.late() and gone.expired()  # given up before it arrived
    # One that arrived in time and then waited past its deadline: expired, not late.
    waited = Budget({DEADLINE_HEADER: str(int((time.time() + 0.5) * 1000))})
    until = time.monotonic() + 3
    while not waited.expired() and time.monotonic() < until:
        time.sleep(0.02)
    assert waited.expired() and not waited.late()
