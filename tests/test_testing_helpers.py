"""`wasmext.testing.host_calls_wat`, the helper docs/embedding.md shows for testing grants."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from wasmext import PluginError, Runtime
from wasmext.testing import (
    REGISTER_AT,
    RESPONSE_AT,
    guest_wat,
    host_calls_wat,
    load_wat,
    make_host,
)

MINOR_1 = {"abi_minor": 1, "hooks": [{"hook": "test"}]}


def test_a_call_without_its_grant_is_denied_as_the_doc_shows() -> None:
    rt = Runtime(cache=False)
    fetcher = load_wat(rt, host_calls_wat({"op": "http.fetch", "url": "http://127.0.0.1/"},
                                          registration=MINOR_1), plugin_id="fetcher")
    with pytest.raises(PluginError) as denied:
        fetcher.call("test")
    assert denied.value.code == "denied" and "fetcher" in str(denied.value)


def test_a_grant_one_typo_from_a_capability_is_refused_at_load() -> None:
    """`rt.load(folder, grants=["stat"])` in a plugin's test loaded, and the state call was
    denied at run time as if no grant had been given; `--grant stat` was refused."""
    from wasmext import ConfigError

    with Runtime(cache=False) as rt:
        with pytest.raises(ConfigError) as caught:
            load_wat(rt, guest_wat(), plugin_id="kb", grants=["state", "stat"])
        assert str(caught.value).startswith("plugin kb: grants: 'stat' is not a capability; "
                                            "did you mean 'state'?")
        # An embedder's own capability (`HostServices.register(..., capability=...)`).
        assert load_wat(rt, guest_wat(), plugin_id="kb", grants=["lookup", "state"])


@pytest.mark.parametrize(("order", "code"), [((0, 1), "denied"), ((1, 0), "unsupported")])
def test_the_hook_answers_with_the_last_requests_answer(order: tuple[int, int],
                                                        code: str) -> None:
    rt = Runtime(cache=False)
    requests = [{"op": "no.such.op"}, {"op": "http.fetch", "url": "http://127.0.0.1/"}]
    plugin = load_wat(rt, host_calls_wat(*(requests[i] for i in order),
                                         registration=MINOR_1), plugin_id="seq")
    with pytest.raises(PluginError) as answer:
        plugin.call("test")
    assert answer.value.code == code


def test_a_registration_longer_than_its_fixed_place_is_read_whole() -> None:
    """guest_wat places a long registration past its data; the answer and the data
    it also carries stay intact."""
    rt = Runtime(cache=False)
    registration = {"hooks": [{"hook": "test"}, {"hook": "other"}], "description": "d" * 6000}
    assert len(msgpack.packb(registration)) > RESPONSE_AT - REGISTER_AT
    plugin = load_wat(rt, guest_wat(registration=registration, data=b"\x01" * 5000,
                                    response={"ok": True, "value": "intact"}))
    assert plugin.call("test").value == "intact"
    assert plugin.call("other").value == "intact"


STORE_THEN_READ = ({"op": "state.get", "key": "seen", "scope": "plugin"},
                   {"op": "state.set", "key": "seen", "value": 1, "scope": "plugin"})


def test_make_host_keeps_nothing_in_the_working_folder_or_between_hosts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin author's tests (`wasmext_host`, `make_host`) start from empty state each
    time and leave no `.wasmext` state file in the project they run in."""
    monkeypatch.chdir(tmp_path)
    wat = host_calls_wat(*STORE_THEN_READ[1:], registration=MINOR_1)
    read = host_calls_wat(STORE_THEN_READ[0], registration=MINOR_1)
    with make_host((wat, {"plugin_id": "keeper", "grants": ["state"]})) as host:
        host.plugins["keeper"].plugin.call("test")
    with make_host((read, {"plugin_id": "keeper", "grants": ["state"]})) as host, \
            pytest.raises(PluginError) as later:
        host.plugins["keeper"].plugin.call("test")
    assert later.value.code == "not_found"  # the first host's value is gone
    assert list(tmp_path.iterdir()) == []


def test_the_wasmext_host_fixture_writes_nothing_to_the_working_folder(tmp_path: Path) -> None:
    """The fixture as a plugin author's own pytest run in their project folder uses it."""
    (tmp_path / "test_author.py").write_text(f"""
from wasmext.testing import host_calls_wat
WAT = host_calls_wat({STORE_THEN_READ[1]!r}, registration={MINOR_1!r})

def test_store(wasmext_host):
    host = wasmext_host((WAT, {{"plugin_id": "keeper", "grants": ["state"]}}))
    host.plugins["keeper"].plugin.call("test")
""")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "test_author.py"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert "1 passed" in run.stdout, run.stdout + run.stderr
    assert {p.name for p in tmp_path.iterdir()} <= {"__pycache__", "test_author.py"}
