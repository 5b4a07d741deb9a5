"""The lazy command table in `wasmext_cli.main` stays true to the commands it names."""

from __future__ import annotations

import importlib

import click
import pytest
from click.testing import CliRunner

from wasmext_cli.main import COMMANDS, main


def _short(summary: str, limit: int) -> str:
    return click.Command("x", help=summary).get_short_help_str(limit)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_entry_is_the_command_it_names(name: str) -> None:
    module, attribute, summary = COMMANDS[name]
    command = getattr(importlib.import_module(module), attribute)
    assert isinstance(command, click.Command)
    assert command.name == name
    for limit in (30, 45, 80, 200):
        assert _short(summary, limit) == command.get_short_help_str(limit)


def test_help_lists_every_command_with_its_summary() -> None:
    out = CliRunner().invoke(main, ["--help"], terminal_width=200).output
    for name, (_module, _attribute, summary) in COMMANDS.items():
        assert f"  {name}  " in out
        assert _short(summary, 200 - 6 - 9) in out


def test_a_command_runs_and_a_nested_group_resolves() -> None:
    result = CliRunner().invoke(main, ["limits"])
    assert result.exit_code == 0 and "fuel" in result.output
    result = CliRunner().invoke(main, ["state", "--help"])
    assert result.exit_code == 0 and "export" in result.output


def test_an_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["no-such-command"])
    assert result.exit_code == 2 and "No such command" in result.output
