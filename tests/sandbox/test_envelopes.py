"""abi/vectors/envelopes.json: the host's verdict on call responses and registrations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wasmext import InvalidOutput, PluginError, Runtime
from wasmext.testing import guest_wat, load_wat

ENVELOPES = json.loads((Path(__file__).resolve().parents[2] / "abi" / "vectors" /
                        "envelopes.json").read_text())


@pytest.mark.parametrize("case", ENVELOPES["call_responses"])
def test_call_response(runtime: Runtime, case: dict[str, Any]) -> None:
    plugin = load_wat(runtime, guest_wat(response=case["response"]))
    if case["verdict"] == "invalid":
        with pytest.raises(InvalidOutput):
            plugin.call("test", "in")
    elif case["verdict"] == "error":
        with pytest.raises(PluginError) as info:
            plugin.call("test", "in")
        assert info.value.code == case["code"]
    else:
        result = plugin.call("test", "in")
        assert (result.value, result.changed, result.stop) == (
            case["value"], case["changed"], case["stop"])


@pytest.mark.parametrize("case", ENVELOPES["registrations"])
def test_registration(runtime: Runtime, case: dict[str, Any]) -> None:
    wat = guest_wat(registration=case["map"])
    if case["verdict"] == "invalid":
        with pytest.raises(InvalidOutput):
            load_wat(runtime, wat)
    else:
        plugin = load_wat(runtime, wat)
        assert [h.hook for h in plugin.registration.hooks] == [
            h["hook"] for h in case["map"]["hooks"]]
