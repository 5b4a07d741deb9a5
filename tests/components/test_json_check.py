"""plugins/json-check: the example plugin written in Python, hook by hook."""

from __future__ import annotations

from typing import Any

import pytest

from support import Built
from wasmext import PluginError, Runtime

# A Python component built for these tests (and the example run): ~27 s of a core cold.
pytestmark = pytest.mark.slow


def ext(answer: str, param: str | None = None) -> dict[str, Any]:
    return {"name": "json", "param": param, "answer": answer, "query": "q", "previous": {}}


def test_json_check_reports_keys_and_missing_ones(components: Built,
                                                  crt: Runtime) -> None:
    plugin = crt.load(components["json-check"])
    assert [(h.hook, h.pattern) for h in plugin.registration.hooks] == [
        ("output_extension", "json")]
    assert plugin.call("output_extension", ext('{"name": "Ada"}', "name,age")).value == {
        "json": True, "object": True, "keys": ["name"], "missing": ["age"]}
    fenced = "Here:\n```json\n[1, 2]\n```\n"
    assert plugin.call("output_extension", ext(fenced)).value == {
        "json": True, "object": False, "keys": [], "missing": []}
    bad = plugin.call("output_extension", ext("not json")).value
    assert bad["json"] is False and "Expecting value" in bad["error"]
    with pytest.raises(PluginError) as info:
        plugin.call("output_extension", {"name": "json"})
    assert info.value.code == "invalid"


def test_json_check_lists_at_most_max_keys(components: Built, crt: Runtime) -> None:
    plugin = crt.load(components["json-check"], plugin_id="few", settings={"max_keys": 2})
    answer = plugin.call("output_extension", ext('{"c": 1, "a": 2, "b": 3}')).value
    assert answer["keys"] == ["a", "b"]
