"""Every command named a plugin (by id, or a plugin folder or bundle by path) or a plugin's
state key that is not there exits the same way: 1, the code of a failure, with one line
naming what it looked for; click's 2 stays for bad usage."""

from __future__ import annotations

from pathlib import Path

import pytest
import wasmtime
from click.testing import CliRunner

from wasmext.files import atomic_write
from wasmext.testing import guest_wat
from wasmext_cli.common import EXIT_NOT_FOUND, EXIT_USAGE
from wasmext_cli.main import main

CFG = ["--config", "wasmext.toml"]
# Each command, named the id `ghost` (or the path ./ghost) that nothing holds.
MISSING = {
    "call": ["call", "ghost", "test"],
    "inspect": ["inspect", "ghost"],
    "grant": ["grant", "ghost", "state", *CFG],
    "revoke": ["revoke", "ghost", *CFG],
    "enable": ["enable", "ghost", *CFG],
    "disable": ["disable", "ghost", *CFG],
    "config set": ["config", "set", "ghost", "greeting", "hi", *CFG],
    "config unset": ["config", "unset", "ghost", "greeting", *CFG],
    "uninstall": ["uninstall", "ghost", *CFG],
    "state get": ["state", "get", "ghost", "k", *CFG],
    "state rm": ["state", "rm", "ghost", "k", *CFG],
    "state ls": ["state", "ls", "--plugin", "ghost", *CFG],
    # A plugin folder or bundle named by path, as `call` and `inspect` name one.
    "build": ["build", "ghost"],
    "pack": ["pack", "ghost", "-o", "ghost.wxb"],
    "push": ["push", "ghost", "oci://127.0.0.1:9/ghost:1"],
    "sign": ["sign", "ghost.wxb", "--key", "wasmext.toml"],
    "install": ["install", "ghost.wxb", *CFG],
}


@pytest.fixture
def operator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with a config whose plugin folder holds one plugin, `kb`."""
    folder = tmp_path / "plugins" / "kb"
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text('id = "kb"\nversion = "0.1.0"\n')
    atomic_write(folder / "kb.wasm", bytes(wasmtime.wat2wasm(guest_wat())))
    (tmp_path / "wasmext.toml").write_text(
        '[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path


@pytest.mark.parametrize("command", sorted(MISSING))
def test_a_missing_plugin_exits_1_with_one_line(operator: Path, command: str) -> None:
    result = CliRunner().invoke(main, MISSING[command])
    assert result.exit_code == EXIT_NOT_FOUND == 1, (command, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wasmext: ") and "ghost" in lines[0]
    # Said once, and not as a config problem: the config is fine, the id is not there.
    assert lines[0].count("ghost") == 1 and "config:" not in lines[0], lines[0]
    assert "Traceback" not in result.output and result.stdout == ""


@pytest.mark.parametrize("command", [["enable", "ghost"], ["disable", "ghost"],
                                     ["config", "set", "ghost", "greeting", "hi"],
                                     ["grant", "ghost", "state"], ["revoke", "ghost"]])
def test_without_a_config_each_says_it_alike_and_how_to_name_a_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    """No wasmext.toml here: every id command says the same words and how to give the
    folder (enable, disable and config set said "no plugin 'ghost' in the plugin folders
    (none configured)", grant and revoke how to name a config)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    result = CliRunner().invoke(main, command)
    assert result.exit_code == EXIT_NOT_FOUND, result.output
    line = result.stderr.strip()
    assert line.startswith("wasmext: plugin ghost is not installed (no ./wasmext.toml here, "
                           "so no plugin folder to look in: give --config FILE, whose "
                           "[plugins] workspace_dir holds the plugin"), line
    # Only the command that takes --plugins offers it.
    assert ("--plugins DIR" in line) == (command[0] == "config"), line


def test_the_installed_plugin_and_bad_usage_are_told_apart(operator: Path) -> None:
    """The same commands on the installed plugin succeed; a bad argument is still 2."""
    for args in (["grant", "kb", "state", *CFG], ["revoke", "kb", *CFG],
                 ["disable", "kb", *CFG], ["enable", "kb", *CFG], ["inspect", "plugins/kb"],
                 ["call", "plugins/kb", "test"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
    refused = CliRunner().invoke(main, ["grant", "kb", "stat", *CFG])  # a typo'd capability
    assert refused.exit_code == EXIT_USAGE


def test_state_ls_tells_a_typo_from_a_plugin_with_no_state_or_state_left_behind(
        operator: Path) -> None:
    """`state ls --plugin nope` listed nothing and exited 0, as for a plugin with no
    state. Now an id neither installed nor holding state is not found (1); the
    installed `kb` with no state lists nothing (0), and the state an uninstalled plugin
    left behind (`uninstall` without --purge-state) is still listed."""
    import json

    import msgpack

    from wasmext.state import Scope, SQLiteStore

    with SQLiteStore.in_data_dir(operator / "data") as store:
        store.set(Scope("gone"), "left", msgpack.packb(1))
    empty = CliRunner().invoke(main, ["state", "ls", "--plugin", "kb", "--json", *CFG])
    assert empty.exit_code == 0 and json.loads(empty.stdout) == [], empty.output
    left = CliRunner().invoke(main, ["state", "ls", "--plugin", "gone", "--json", *CFG])
    assert left.exit_code == 0, left.output
    assert [(r["plugin"], r["key"]) for r in json.loads(left.stdout)] == [("gone", "left")]
    typo = CliRunner().invoke(main, ["state", "ls", "--plugin", "nope", *CFG])
    assert typo.exit_code == EXIT_NOT_FOUND
    assert typo.stderr.startswith("wasmext: plugin nope is not installed in ")
    assert typo.stderr.rstrip().endswith(" and has no stored state")
