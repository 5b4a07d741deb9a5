"""A plugin's next instance reuses the registration parsed for the last one, and only
when its map is the same: a map that differs is parsed (and checked) again."""

from __future__ import annotations

from typing import Any

import pytest

from wasmext import Runtime
from wasmext.errors import InvalidOutput
from wasmext.sandbox.instance import PluginInstance
from wasmext.testing import guest_wat, load_wat


def test_the_parsed_registration_is_reused_for_an_equal_map(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with Runtime(cache=False) as rt:
        plugin = load_wat(rt, guest_wat(hooks=("first",)), plugin_id="reuse")
        parsed = plugin.registration
        plugin.new_instance()
        assert plugin.registration is parsed  # the same map: not parsed again
        real_start = PluginInstance.start
        answers: list[dict[str, Any]] = [
            {"hooks": [{"hook": "second"}]},
            {"hooks": "not an array"},
        ]

        def start(self: PluginInstance, request: dict[str, Any]) -> dict[str, Any]:
            real_start(self, request)
            return answers.pop(0)

        monkeypatch.setattr(PluginInstance, "start", start)
        plugin.new_instance()
        assert plugin.registration.hook_names == ("second",)
        with pytest.raises(InvalidOutput, match="'hooks' must be an array"):
            plugin.new_instance()
        assert plugin.registration.hook_names == ("second",)
