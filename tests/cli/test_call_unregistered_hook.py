"""`wasmext call` of a hook the plugin does not register says so and names the hooks it
does: the guest SDKs answer such a call `unhandled` without a message, which printed as
`plugin hello hook nohook: unhandled:` and nothing after."""

from __future__ import annotations

from pathlib import Path

import pytest
import wasmtime
from click.testing import CliRunner

from wasmext.testing import guest_wat
from wasmext_cli.main import main

UNHANDLED = {"ok": False, "error": {"code": "unhandled", "message": ""}}


def _module(tmp_path: Path, name: str, hooks: tuple[str, ...]) -> Path:
    path = tmp_path / f"{name}.wasm"
    path.write_bytes(bytes(wasmtime.wat2wasm(guest_wat(
        response=UNHANDLED, registration={"hooks": [{"hook": h} for h in hooks],
                                          "name": name}))))
    return path


def test_an_unregistered_hook_is_named_with_the_hooks_there_are(tmp_path: Path) -> None:
    module = _module(tmp_path, "hello", ("greet", "on_plain_text"))
    result = CliRunner().invoke(main, ["call", str(module), "nohook"])
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (
        "wasmext: plugin hello hook nohook: unhandled: the plugin registers no hook "
        "'nohook' (its hooks: greet, on_plain_text)")


@pytest.mark.parametrize("hooks", [("greet",), ()])
def test_a_registered_hooks_own_unhandled_answer_is_left_as_the_plugin_gave_it(
        tmp_path: Path, hooks: tuple[str, ...]) -> None:
    module = _module(tmp_path, "hello", hooks)
    result = CliRunner().invoke(main, ["call", str(module), "greet"])
    assert result.exit_code == 1
    line = result.stderr.strip()
    if hooks:  # the plugin registers it: its answer is its own
        assert line == "wasmext: plugin hello hook greet: unhandled:"
    else:
        assert line.endswith("registers no hook 'greet' (its hooks: none)")
