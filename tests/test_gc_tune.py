"""What CPython's full garbage collection has to scan: a session and its calls leave
no reference cycle (everything dies by reference count), `wasmext.tune_gc()` leaves
the start-up heap out of later collections, and the `wasmext` commands call it after
start-up unless `[host] gc_freeze = false` (docs/performance.md, sixth round)."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
import types
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
import wasmtime
from click.testing import CliRunner

from wasmext import Trace, load_config, tune_gc
from wasmext.testing import guest_wat, make_host
from wasmext_cli.main import main


@pytest.fixture
def thawed() -> Iterator[None]:
    """The test process's heap unfrozen before and after (freezing is process-wide)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.fixture
def host() -> Iterator[object]:
    noop = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True},
                                             hooks=("on_plain_text", "session_start",
                                                    "session_end"))))
    with make_host((noop, {"plugin_id": "noop"})) as h:
        yield h


def _ours(o: object) -> bool:
    kind = type(o)
    if kind.__module__.startswith("wasmext"):
        return True
    code = (getattr(o, "f_code", None) or getattr(o, "gi_code", None)
            or getattr(o, "cr_code", None) or getattr(o, "ag_code", None))
    if code is None and isinstance(o, types.FunctionType):
        code = o.__code__
    return code is not None and f"{os.sep}wasmext{os.sep}" in code.co_filename


def wasmext_cycles() -> list[object]:
    """The unreachable objects of wasmext's making (its classes, frames, functions) that
    only the cycle collector could free; other threads' garbage is not counted."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = [o for o in gc.garbage if _ours(o)]
    finally:
        gc.set_debug(0)
        del gc.garbage[:]
    return found


def test_the_cycle_check_sees_a_cycle_of_wasmext_objects(no_collector: None) -> None:
    trace = Trace()
    trace.limit = trace  # type: ignore[assignment]  # a cycle through a wasmext object
    del trace
    assert any(isinstance(o, Trace) for o in wasmext_cycles())


def test_sync_sessions_and_their_calls_leave_no_reference_cycle(host, no_collector) -> None:  # type: ignore[no-untyped-def]
    with host.session() as s:  # the first: caches and pools filled
        s.on_plain_text("warm")
    gc.collect()
    for _ in range(3):
        with host.session() as s:
            assert s.on_plain_text("hi").value == "hi"
            assert s.trace.events  # the trace read too
    assert wasmext_cycles() == []


@pytest.mark.parametrize("inline_below_ms", [0, 10_000])  # in the call pool, on the loop
def test_async_sessions_and_their_calls_leave_no_reference_cycle(
        host, no_collector, inline_below_ms: float) -> None:  # type: ignore[no-untyped-def]
    async def sessions(n: int) -> None:
        for _ in range(n):
            async with host.asession(inline_below_ms=inline_below_ms) as s:
                assert (await s.on_plain_text("hi")).value == "hi"

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(sessions(1))  # warm: the loop's share, the pool's threads
        gc.collect()
        loop.run_until_complete(sessions(5))
        assert wasmext_cycles() == []
    finally:
        loop.close()


def test_an_async_session_whose_body_raises_still_runs_session_end(host) -> None:  # type: ignore[no-untyped-def]
    opened = []

    async def failing() -> None:
        async with host.asession(inline_below_ms=10_000) as s:
            opened.append(s)
            await s.on_plain_text("hi")
            raise KeyError("the application's")

    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(KeyError):
            loop.run_until_complete(failing())
    finally:
        loop.close()
    hooks = [e.hook for e in opened[0].trace.events]
    assert hooks[0] == "session_start" and hooks[-1] == "session_end"


def test_tune_gc_leaves_what_is_alive_out_of_later_collections(thawed: None) -> None:
    before = ["made before start-up ended"]
    frozen = tune_gc()
    after = ["made after"]
    assert frozen > 0 and gc.get_freeze_count() > 0
    tracked = gc.get_objects()
    assert any(o is after for o in tracked)
    assert not any(o is before for o in tracked)  # never scanned again


def _run_config(tmp_path: Path, gc_freeze: bool | None) -> list[str]:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "transcript.json").write_text(json.dumps({
        "model": "demo-model", "system": "s",
        "turns": [{"user": "hi", "steps": [{"response": "hello"}]}]}))
    line = "" if gc_freeze is None else f"gc_freeze = {str(gc_freeze).lower()}\n"
    config = tmp_path / "wasmext.toml"
    config.write_text(f'[host]\ndata_dir = "{tmp_path / "data"}"\n{line}'
                      f'[plugins]\nworkspace_dir = "{tmp_path / "plugins"}"\n'
                      f'user_dir = "{tmp_path / "user"}"\n')
    return ["run", str(tmp_path / "transcript.json"), "--config", str(config), "--json"]


@pytest.mark.parametrize(("gc_freeze", "freezes"), [(None, True), (True, True),
                                                   (False, False)])
def test_wasmext_run_freezes_its_start_up_heap_unless_configured_not_to(
        tmp_path: Path, thawed: None, gc_freeze: bool | None, freezes: bool) -> None:
    result = CliRunner().invoke(main, _run_config(tmp_path, gc_freeze))
    assert result.exit_code == 0, result.output
    assert (gc.get_freeze_count() > 0) is freezes


def test_gc_freeze_is_a_host_setting(tmp_path: Path) -> None:
    config = tmp_path / "wasmext.toml"
    config.write_text("[host]\ngc_freeze = false\n")
    assert load_config(config).gc_freeze is False
    config.write_text("[host]\n")
    assert load_config(config).gc_freeze is True


class _Node:
    """A weakly referable object that can be made part of a cycle."""

    ref: object = None


def test_given_the_host_tune_gc_frees_frozen_cycles_after_a_plugin_is_loaded(
        host, thawed: None) -> None:  # type: ignore[no-untyped-def]
    node = _Node()
    node.ref = node  # a cycle, alive at start-up
    alive = weakref.ref(node)
    tune_gc(host)
    del node  # garbage now, but frozen: no collection frees it
    gc.collect()
    assert alive() is not None
    replacement = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True},
                                                    hooks=("on_plain_text",))))
    host.add(replacement, plugin_id="noop", replace=True)  # thaw, collect, freeze again
    deadline = time.monotonic() + 5
    while (alive() is not None or not gc.get_freeze_count()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert alive() is None
    assert gc.get_freeze_count() > 0  # and frozen again
