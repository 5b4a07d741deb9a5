"""`wasmext call`'s error lines say what went wrong once and in full: a hook the plugin
does not register is named with the hooks it does (the guest SDKs answer such a call
`unhandled` without a message, which printed `plugin hello hook nohook: unhandled:` and
nothing after), and a setting error names the plugin once."""

from __future__ import annotations

from pathlib import Path

import pytest
import wasmtime
from click.testing import CliRunner

from wasmext.testing import guest_wat
from wasmext_cli.common import EXIT_USAGE
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


def test_the_library_names_the_hooks_there_are_too(tmp_path: Path) -> None:
    """A plugin's own test (`plugin.call("greet", ...)` through wasmext's Python API) of a
    hook the plugin registers under another name failed with the guest's `no handler for
    hook 'greet'` alone: the hooks there are were `wasmext call`'s to say."""
    from wasmext import PluginError, Runtime

    module = _module(tmp_path, "hello", ("gret",))
    with Runtime(cache=False) as runtime:
        plugin = runtime.load(module)
        with pytest.raises(PluginError) as caught:
            plugin.call("greet", "Ada")
        assert str(caught.value) == "the plugin registers no hook 'greet' (its hooks: gret)"
        assert caught.value.code == "unhandled" and caught.value.plugin_id == "hello"
        with pytest.raises(PluginError) as own:  # a registered hook's answer is its own
            plugin.call("gret", "Ada")
        assert str(own.value) == ""


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


def _greeter(tmp_path: Path) -> Path:
    """A plugin folder `hello` registering `greet`, declaring settings greeting and times."""
    folder = tmp_path / "hello"
    folder.mkdir()
    (folder / "hello.wasm").write_bytes(bytes(wasmtime.wat2wasm(guest_wat(
        registration={"hooks": [{"hook": "greet"}], "name": "hello"}))))
    (folder / "plugin.toml").write_text('id = "hello"\nversion = "0.1.0"\n'
                                        '[settings.greeting]\ndefault = "Hello"\n'
                                        '[settings.times]\ntype = "integer"\ndefault = 1\n')
    return folder


def test_a_setting_error_names_the_plugin_once(tmp_path: Path) -> None:
    """`--set greting=Hi` said `plugin hello: config: plugin hello: unknown setting`."""
    folder = _greeter(tmp_path)
    result = CliRunner().invoke(main, ["call", str(folder), "greet", "--set", "greting=Hi"])
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.strip() == ("wasmext: plugin hello: config: unknown setting "
                                     "'greting'; declared: greeting, times")


@pytest.mark.parametrize("pair", ["greting=Hi", "times=many"])
def test_a_setting_the_manifest_does_not_allow_is_a_usage_error(tmp_path: Path,
                                                                pair: str) -> None:
    """`--set` of a setting plugin.toml does not declare (or of a value not of its type)
    exited 1, as a plugin's failure; it is a bad argument, 2 like every other one, and
    the plugin is not called."""
    folder = _greeter(tmp_path)
    result = CliRunner().invoke(main, ["call", str(folder), "greet", "--set", pair])
    assert result.exit_code == EXIT_USAGE == 2, result.output
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("wasmext: plugin hello: config: ")
    ok = CliRunner().invoke(main, ["call", str(folder), "greet", "--set", "times=3"])
    assert ok.exit_code == 0, ok.output
