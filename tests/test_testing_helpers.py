"""`wasmext.testing.host_calls_wat`, the helper docs/embedding.md shows for testing grants."""

from __future__ import annotations

import msgpack
import pytest

from wasmext import PluginError, Runtime
from wasmext.testing import REGISTER_AT, RESPONSE_AT, guest_wat, host_calls_wat, load_wat

MINOR_1 = {"abi_minor": 1, "hooks": [{"hook": "test"}]}


def test_a_call_without_its_grant_is_denied_as_the_doc_shows() -> None:
    rt = Runtime(cache=False)
    fetcher = load_wat(rt, host_calls_wat({"op": "http.fetch", "url": "http://127.0.0.1/"},
                                          registration=MINOR_1), plugin_id="fetcher")
    with pytest.raises(PluginError) as denied:
        fetcher.call("test")
    assert denied.value.code == "denied" and "fetcher" in str(denied.value)


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
