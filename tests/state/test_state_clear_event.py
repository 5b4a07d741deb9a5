"""The seed's "log state clear event": a committed state.clear is one log record
(event state.clear, plugin, session, scope, entries), still counted as a state op;
a clear the call rolled back is not logged."""

from __future__ import annotations

import logging

import msgpack
import pytest
import wasmtime

from wasmext.state import Scope
from wasmext.testing import DATA_AT, guest_wat, make_host

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
CLEAR = msgpack.packb({"op": "state.clear"})


def clearer(then_trap: bool = False) -> bytes:
    body = f"(drop (call $host_call (i32.const {DATA_AT}) (i32.const {len(CLEAR)})))"
    wat = guest_wat(body + ("(unreachable)" if then_trap else
                            "(i64.const 0)"), imports=HOST_CALL, data=CLEAR,
                    registration={"hooks": [{"hook": "on_plain_text"}]})
    return bytes(wasmtime.wat2wasm(wat))


def cleared_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "state.clear"]


def test_a_committed_clear_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="wasmext.state")
    with make_host((clearer(), {"plugin_id": "tidy", "grants": {"state"}})) as host:
        with host.session("s-1") as s:
            for key in ("a", "b"):
                host.state_store().set(Scope("tidy", "s-1"), key, b"\x01")
            assert s.on_plain_text("x").failed == []
            assert host.state_store().keys(Scope("tidy", "s-1")) == []
        text = host.observe.metrics.exposition().decode()
    [record] = cleared_records(caplog)
    assert (record.plugin_id, record.session, record.scope, record.entries) == \
        ("tidy", "s-1", "session", 2)
    assert "plugin tidy cleared its session state (2 entries)" in record.getMessage()
    assert 'operation="clear"' in text


def test_a_rolled_back_clear_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="wasmext.state")
    with make_host((clearer(then_trap=True), {"plugin_id": "tidy", "grants": {"state"}})
                   ) as host, host.session("s-1") as s:
        host.state_store().set(Scope("tidy", "s-1"), "a", b"\x01")
        assert s.on_plain_text("x").failed == ["tidy"]
        assert host.state_store().keys(Scope("tidy", "s-1")) == ["a"]
    assert cleared_records(caplog) == []
