"""The guest SDKs that declare an answer region (ABI minor 3, SPEC 1.4), end to end.

Each one's conformance plugin declares its area when the host speaks minor 3, takes
the answers written there, keeps every answer it handed out intact across the host
calls after it (`hosts` holds them all), still takes an answer too large for the area
from wasmext_alloc, and declares nothing to a host of minor 2.
"""

from __future__ import annotations

from typing import Any

import pytest

from support import Built
from wasmext import Runtime
from wasmext._abi import ABI_MINOR
from wasmext.sandbox import plugin as plugin_module

# The SDKs that opt in; the others keep delivering every answer through wasmext_alloc.
OPTED_IN = ["assemblyscript", "c", "go", "rust", "zig"]

REQUESTS = [{"op": "config.get", "key": "greeting"}, {"op": "config.get", "key": "count"},
            {"op": "config.get"}, {"op": "no.such.op"}, {"op": "config.get", "key": "greeting"}]


def _load(built: Built, rt: Runtime, lang: str, **kwargs: Any) -> Any:
    return rt.load(built[f"conformance-{lang}"], settings={"greeting": "Servus", "count": 7},
                   plugin_id=f"conf-{lang}", **kwargs)


@pytest.mark.parametrize("lang", OPTED_IN)
def test_the_sdk_declares_its_area_and_answers_land_there(built: Built, crt: Runtime,
                                                         lang: str) -> None:
    plugin = _load(built, crt, lang)
    reg = plugin.registration
    assert reg.abi_minor == ABI_MINOR == 3
    assert reg.answer_region is not None
    ptr, size = reg.answer_region
    assert ptr > 0 and size >= 256
    assert [plugin.call("config", "greeting").value for _ in range(3)] == ["Servus"] * 3
    # Every answer fitted: the host never entered wasmext_alloc to deliver one.
    assert all(inst._alloc_fn is None for inst in plugin._idle)


@pytest.mark.parametrize("lang", OPTED_IN)
def test_answers_outlive_the_host_calls_after_them(built: Built, crt: Runtime,
                                                   lang: str) -> None:
    plugin = _load(built, crt, lang)
    answers = plugin.call("hosts", REQUESTS).value
    assert answers[0] == answers[4] == {"ok": True, "value": "Servus"}
    assert answers[1] == {"ok": True, "value": 7}
    assert answers[2] == {"ok": True, "value": dict(plugin.settings)}
    assert {"greeting": "Servus", "count": 7}.items() <= answers[2]["value"].items()
    assert answers[3]["error"]["code"] == "unsupported"


@pytest.mark.parametrize("lang", OPTED_IN)
def test_an_answer_larger_than_the_area_comes_through_wasmext_alloc(
        built: Built, crt: Runtime, lang: str) -> None:
    plugin = _load(built, crt, lang)
    size = plugin.registration.answer_region[1]
    plugin.settings["greeting"] = "y" * (size + 100)
    answers = plugin.call("hosts", REQUESTS[:2] + REQUESTS[:1]).value
    assert answers == [{"ok": True, "value": "y" * (size + 100)}, {"ok": True, "value": 7},
                       {"ok": True, "value": "y" * (size + 100)}]
    plugin.settings["greeting"] = "short again"
    assert plugin.call("config", "greeting").value == "short again"


@pytest.mark.parametrize("lang", OPTED_IN)
def test_a_host_of_minor_2_gets_no_area_and_the_sdk_works_as_before(
        built: Built, crt: Runtime, lang: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The registration request says minor 2 and the parse honours no newer key: what a
    # host from before minor 3 did.
    monkeypatch.setattr(plugin_module, "ABI_MINOR", 2)
    plugin = _load(built, crt, lang)
    assert plugin.registration.answer_region is None
    assert "answer_region" not in plugin.registration.extra  # the SDK left it out
    assert plugin.call("config", "greeting").value == "Servus"
    answers = plugin.call("hosts", REQUESTS).value
    assert answers[0] == answers[4] == {"ok": True, "value": "Servus"}
    assert all(inst._alloc_fn is not None for inst in plugin._idle)
