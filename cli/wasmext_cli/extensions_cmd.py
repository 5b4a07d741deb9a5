"""`wasmext extensions`: output extensions, users' activations, saved turns, user copies."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from wasmext.errors import WasmextError
from wasmext_cli.common import (
    CONFIG_OPT,
    EXIT_USAGE,
    PLUGINS_OPT,
    _default_config,
    _dumps,
    _echo_json,
    _fail,
    _host,
    _line,
)

F = TypeVar("F", bound=Callable[..., Any])
USER_OPT = click.option("--user", required=True,
                        help="The user (or tenant) id the activations belong to.")
JSON_OPT = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def host_options(fn: F) -> F:
    """Add the --config and --plugins options to a command."""
    return CONFIG_OPT(PLUGINS_OPT(fn))


@contextmanager
def _opened(config: Path | None, plugin_dirs: tuple[Path, ...]) -> Iterator[Any]:
    try:
        host = _host(_default_config(config), plugin_dirs)
    except WasmextError as err:
        _fail(err, EXIT_USAGE)
    with host:
        try:
            yield host
        except WasmextError as err:
            _fail(err, EXIT_USAGE)


@click.group()
def extensions() -> None:
    """Output extensions (#name): users' activations, saved turns, user copies."""


@extensions.command("list")
@host_options
@click.option("--user", help="List this user's activations instead of the served names.")
@click.option("--all", "include_inactive", is_flag=True, help="With --user: inactive too.")
@JSON_OPT
def list_extensions(config: Path | None, plugin_dirs: tuple[Path, ...], user: str | None,
                    include_inactive: bool, as_json: bool) -> None:
    """List the extensions the plugins serve, or one user's activations."""
    from wasmext.hooks.extensions import declared

    with _opened(config, plugin_dirs) as host:
        if user is not None:
            rows = [a.as_dict() for a in host.extensions.list(
                user, include_inactive=include_inactive)]
        else:
            rows = []
            for entry in host.ordered("output_extension"):
                decl = declared(host, entry.pattern) if entry.pattern else None
                rows.append({"name": entry.pattern, "plugin": entry.plugin_id,
                             "allowed_params": (decl or {}).get("allowed_params"),
                             "output_target": (decl or {}).get("output_target", "silent")})
    if as_json:
        _echo_json(rows)
        return
    for row in rows:  # names and params were chosen by plugins: one inert line each
        if user is not None:
            state = "" if row["active"] else " (inactive)"
            param = f" default_param={row['default_param']}" if row["default_param"] else ""
            click.echo(_line(f"#{row['name']} -> {row['extension']}{param}{state}"))
        else:
            click.echo(_line(f"#{row['name']}  {row['plugin']}  {row['output_target']}"))


@extensions.command()
@host_options
@USER_OPT
@click.argument("extension")
@click.option("--as", "name", help="The #name (default: EXTENSION, then EXTENSION2, ...).")
@click.option("--param", "default_param", help="The param used when #name gives none.")
@JSON_OPT
def activate(config: Path | None, plugin_dirs: tuple[Path, ...], user: str, extension: str,
             name: str | None, default_param: str | None, as_json: bool) -> None:
    """Activate EXTENSION for a user (several times under different names)."""
    with _opened(config, plugin_dirs) as host:
        act = host.extensions.activate(user, extension, name=name, default_param=default_param)
    if as_json:
        _echo_json(act.as_dict())
    else:
        click.echo(_line(f"activated #{act.name} -> {act.extension} for {user}"))


@extensions.command()
@host_options
@USER_OPT
@click.argument("name")
def deactivate(config: Path | None, plugin_dirs: tuple[Path, ...], user: str, name: str) -> None:
    """Switch a user's activation NAME off (kept, with its default param)."""
    with _opened(config, plugin_dirs) as host:
        host.extensions.deactivate(user, name)
    click.echo(_line(f"deactivated #{name} for {user}"))


@extensions.command()
@host_options
@USER_OPT
@click.argument("name")
@click.argument("default_param", required=False)
def param(config: Path | None, plugin_dirs: tuple[Path, ...], user: str, name: str,
          default_param: str | None) -> None:
    """Set (or, without DEFAULT_PARAM, clear) the default param of a user's NAME."""
    with _opened(config, plugin_dirs) as host:
        act = host.extensions.configure(user, name, default_param=default_param)
    click.echo(_line(f"#{act.name} default_param={act.default_param}"))


@extensions.command()
@host_options
@USER_OPT
@click.argument("name")
def remove(config: Path | None, plugin_dirs: tuple[Path, ...], user: str, name: str) -> None:
    """Delete a user's activation NAME."""
    with _opened(config, plugin_dirs) as host:
        if not host.extensions.delete(user, name):
            raise click.UsageError(f"user has no activation named {name!r}")
    click.echo(_line(f"removed #{name} for {user}"))


@extensions.command()
@host_options
@click.option("--session", "session_id", required=True, help="The session id.")
@JSON_OPT
def history(config: Path | None, plugin_dirs: tuple[Path, ...], session_id: str,
            as_json: bool) -> None:
    """Show the extension results saved with each turn of a session."""
    with _opened(config, plugin_dirs) as host:
        turns = host.extensions.history(session_id)
    if as_json:
        _echo_json(turns)
        return
    for turn in turns:
        click.echo(_line(f"{turn.get('turn_id')}: {turn.get('query')}"))
        for r in turn.get("results", []):
            status = "ok" if r.get("success") else f"failed: {r.get('error')}"
            click.echo(_line(f"  #{r.get('name')} [{status}] ({r.get('output_target')}) "
                             f"{_dumps(r.get('content'))}"))


@extensions.command()
@host_options
@click.argument("ident")
@click.option("--as", "new_id", help="The copy's plugin id (default: ID-copy, ID-copy-2, ...).")
def copy(config: Path | None, plugin_dirs: tuple[Path, ...], ident: str,
         new_id: str | None) -> None:
    """Copy the plugin serving #IDENT (or plugin IDENT) into the user folder, to edit."""
    from wasmext.lifecycle.usercopy import copy_to_user

    with _opened(config, plugin_dirs) as host:
        copy_id, folder = copy_to_user(host, ident, new_id)
    click.echo(_line(f"copied to {folder} as plugin {copy_id}; edit it, then `wasmext build "
                     f"{folder}`"))
