"""Where an awaited session ends: on the loop when ending touches no state store,
on a worker thread when it may (a store is open, or a session_end plugin holds the
state grant)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import wasmtime

from wasmext.session import Session
from wasmext.testing import guest_wat, make_host

ECHO = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True}, hooks=("on_plain_text",))))
ENDER = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True}, hooks=("session_end",))))


def _ended_on(host: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """(the loop's thread name, the thread Session.end ran on) for one async session."""
    ran_on: list[str] = []
    end = Session.end

    def recording_end(self: Session) -> Any:
        ran_on.append(threading.current_thread().name)
        return end(self)
    monkeypatch.setattr(Session, "end", recording_end)

    async def main() -> str:
        async with host.asession(inline_below_ms=10_000) as s:
            assert (await s.on_plain_text("hi")).value == "hi"
        return threading.current_thread().name

    loop_thread = asyncio.run(main())
    assert len(ran_on) == 1
    return loop_thread, ran_on[0]


def test_a_session_with_no_state_store_open_ends_on_the_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with make_host((ECHO, {"plugin_id": "echo"}), (ENDER, {"plugin_id": "ender"})) as host:
        assert not host.keeps_session_state()
        loop_thread, end_thread = _ended_on(host, monkeypatch)
        assert end_thread == loop_thread


def test_a_session_ends_on_a_worker_when_a_state_store_is_open(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from wasmext import HostConfig

    config = HostConfig(data_dir=tmp_path, state_backend="sqlite")
    with make_host((ECHO, {"plugin_id": "echo"}), config=config) as host:
        host.state_store()  # opened: ending deletes the session's rows (I/O)
        assert host.keeps_session_state()
        loop_thread, end_thread = _ended_on(host, monkeypatch)
        assert end_thread != loop_thread and end_thread.startswith("wasmext-call")


def test_a_session_ends_on_a_worker_when_a_session_end_plugin_may_open_the_store(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from wasmext import HostConfig

    config = HostConfig(data_dir=tmp_path, state_backend="sqlite")
    with make_host((ECHO, {"plugin_id": "echo"}),
                   (ENDER, {"plugin_id": "ender", "grants": {"state"}}), config=config) as host:
        assert not host.keeps_session_state()
        loop_thread, end_thread = _ended_on(host, monkeypatch)
        assert end_thread != loop_thread and end_thread.startswith("wasmext-call")
