"""wasmext.loops: which event loop wasmext makes for itself, and refusals that name why."""

from __future__ import annotations

import asyncio
import sys

import pytest

from wasmext.errors import ConfigError
from wasmext.loops import EVENT_LOOP_ENV, loop_factory, loop_name, new_event_loop, run_on


async def _running() -> str:
    return loop_name(asyncio.get_running_loop())


@pytest.mark.parametrize("choice", ["asyncio", "uvloop"])
def test_each_choice_makes_its_own_kind_of_loop(choice: str) -> None:
    loop = new_event_loop(choice)
    try:
        assert loop_name(loop) == choice
        assert loop.run_until_complete(_running()) == choice
    finally:
        loop.close()
    assert run_on(loop_factory(choice), _running()) == choice


def test_asyncio_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    assert loop_factory() is asyncio.new_event_loop
    assert run_on(loop_factory(), _running()) == "asyncio"


def test_the_environment_chooses_for_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP_ENV, " UVloop ")
    assert run_on(loop_factory(), _running()) == "uvloop"
    assert loop_factory("asyncio") is asyncio.new_event_loop  # a choice given wins


def test_without_uvloop_it_is_refused_naming_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # an `import uvloop` that fails
    assert loop_factory("asyncio") is asyncio.new_event_loop
    with pytest.raises(ConfigError, match=r"uvloop is not installed: pip install "
                                          r"'wasmext\[nats\]'"):
        loop_factory("uvloop")


def test_an_unknown_choice_is_refused_in_one_clean_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP_ENV, "trio\x1b[31m\nforged line" + "x" * 500)
    with pytest.raises(ConfigError) as caught:
        loop_factory()
    text = str(caught.value)
    assert "is not one of asyncio, uvloop (WASMEXT_EVENT_LOOP or --loop)" in text
    assert "\x1b" not in text and "\n" not in text and len(text) < 200
