"""A plugin's registration map names regular expressions the host runs: `context_match`
patterns of prompt additions, searched in the application's context at every prompt
assembled, on the host's thread and outside any call budget. Python's backtracking `re`
took 3 s for `^(a|a)*$` against 24 characters, doubling with each more; the host now
searches with the linear-time engine tool schemas use, and refuses at load a pattern that
engine does not compile or that is over `MAX_PATTERN_CHARS`."""

from __future__ import annotations

import time
from typing import Any

import pytest
import wasmtime

from wasmext import Host, Runtime
from wasmext.config import HostConfig
from wasmext.errors import LoadError
from wasmext.hooks.registration import MAX_PATTERN_CHARS
from wasmext.testing import guest_wat

BOUND_S = 2.0  # a linear search of a few kilobytes takes microseconds


def with_pattern(pattern: str) -> bytes:
    registration = {"hooks": [{"hook": "test"}], "prompt": [{
        "position": "system_suffix", "content": "matched",
        "when": {"context_match": {"key": "q", "pattern": pattern}}}]}
    return bytes(wasmtime.wat2wasm(guest_wat(registration=registration,
                                             response={"ok": True, "value": "alive"})))


def new_host() -> Host:
    return Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[])


@pytest.mark.parametrize("pattern", ["^(a|a)*$", "^(a+)+$", "(.*.*)*#", "^(\\w+\\s?)*$"])
def test_a_catastrophic_pattern_costs_the_host_no_time(pattern: str) -> None:
    host = new_host()
    host.add(with_pattern(pattern), plugin_id="redos")
    with host, host.session() as s:
        for value in ("a" * 40 + "!", "a" * 10_000 + "!", "word " * 2_000 + "!"):
            started = time.monotonic()
            prompt = s.prompt("base", "q", context={"q": value})
            assert time.monotonic() - started < BOUND_S
            assert prompt.system == "base"  # none of them matches
        assert host.plugins["redos"].plugin.call("test").value == "alive"


def test_a_pattern_still_searches_the_context_value() -> None:
    host = new_host()
    host.add(with_pattern("urg(ent|ence)\\b"), plugin_id="finder")
    with host, host.session() as s:
        assert s.prompt("base", "q", context={"q": "this is urgent!"}).system == \
            "base\nmatched"
        assert s.prompt("base", "q", context={"q": "urgently"}).system == "base"
        assert s.prompt("base", "q", context={}).system == "base"


@pytest.mark.parametrize(("pattern", "why"), [
    ("(?=a)a", "not a regular expression of the linear-time engine"),
    ("(a)\\1", "not a regular expression of the linear-time engine"),
    ("a" * (MAX_PATTERN_CHARS + 1), f"at most {MAX_PATTERN_CHARS} characters"),
])
def test_a_pattern_the_engine_cannot_run_is_refused_at_load(pattern: str, why: str) -> None:
    host = new_host()
    started = time.monotonic()
    with pytest.raises(LoadError) as info:
        host.add(with_pattern(pattern), plugin_id="refused")
    assert time.monotonic() - started < BOUND_S
    message: Any = info.value.message
    assert "registration field 'prompt[0].when'" in message and why in message
    assert "refused" not in host.plugins
    host.add(with_pattern("fine"), plugin_id="healthy")
    with host:
        assert host.plugins["healthy"].plugin.call("test").value == "alive"
