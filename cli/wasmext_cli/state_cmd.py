"""`wasmext state ls|get|rm|export|import`: the operator's view of plugin state."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any, Literal

import click

from wasmext.errors import WasmextError
from wasmext_cli.common import (
    CONFIG_OPT,
    EXIT_USAGE,
    _default_config,
    _dumps,
    _fail,
    _line,
    looked_in,
    not_found,
)


def _config(config: Path | None) -> Any:
    from wasmext.config import HostConfig, load_config

    try:
        return load_config(config) if config else HostConfig()
    except WasmextError as err:
        _fail(err, EXIT_USAGE)


def _store(config: Path | None, cfg: Any = None) -> Any:
    from wasmext.config import open_store

    try:
        return open_store(cfg if cfg is not None else _config(config))
    except WasmextError as err:
        _fail(err, EXIT_USAGE)


def _scope(plugin: str, session: str | None) -> Any:
    from wasmext.state import Scope

    try:
        return Scope(plugin, session)
    except WasmextError as err:
        raise click.BadParameter(err.message) from err


FORMAT_BY_SUFFIX: dict[str, Literal["msgpack", "json"]] = {
    ".json": "json", ".msgpack": "msgpack", ".mpk": "msgpack", ".msgpck": "msgpack"}
SESSION_OPT = click.option("--session", help="The session (default: the plugin-global scope).")


@click.group()
def state() -> None:
    """Inspect, back up and move plugin state."""


@state.command("ls")
@CONFIG_OPT
@click.option("--plugin", help="Only this plugin.")
@click.option("--json", "as_json", is_flag=True)
def ls(config: Path | None, plugin: str | None, as_json: bool) -> None:
    """List every stored entry: plugin, scope, key, size, expiry.

    --plugin ID of a plugin that is not installed and has no stored entry is a typo:
    it exits 1 (EXIT_NOT_FOUND), as every command does for a plugin not there. An
    uninstalled plugin's state (`uninstall` without --purge-state) is still listed.
    """
    cfg = _config(_default_config(config))
    with _store(None, cfg) as store:
        records = [r for r in store.records() if plugin is None or r.plugin == plugin]
    if plugin is not None and not records:
        from wasmext.lifecycle.uninstall import find_folder

        if find_folder(cfg.plugin_dirs(), plugin) is None:
            not_found(f"plugin {_line(plugin, 64)} is not installed{looked_in(cfg)} and has "
                      "no stored state")
    rows = [{"plugin": r.plugin, "session": r.session, "key": r.key, "bytes": len(r.value),
             "expires": dt.datetime.fromtimestamp(r.expires_at, dt.timezone.utc)
             .strftime("%Y-%m-%dT%H:%M:%SZ")} for r in records]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:  # an empty stdout alone left the operator guessing where it looked
        whose = f" of plugin {_line(plugin, 64)}" if plugin is not None else ""
        click.echo(f"no stored state{whose} (state backend {cfg.state_backend}, data_dir "
                   f"{_line(str(cfg.data_dir))})", err=True)
    for row in rows:  # plugin, session and key were chosen by plugins: one inert line each
        click.echo(f"{_line(row['plugin'], 64):<18} {_line(row['session'] or '(global)', 64):<16} "
                   f"{_line(row['key'], 128):<24} "
                   f"{row['bytes']:>8} B  expires {row['expires']}")


@state.command("get")
@CONFIG_OPT
@SESSION_OPT
@click.argument("plugin")
@click.argument("key")
def get(config: Path | None, session: str | None, plugin: str, key: str) -> None:
    """Print one value as JSON."""
    with _store(_default_config(config)) as store:
        raw = store.get(_scope(plugin, session), key)
    if raw is None:
        not_found(f"no key {key!r} for {_scope(plugin, session)}")
    import msgpack

    # whole (the operator asked for this value), but no raw control or bidi character
    click.echo(_dumps(msgpack.unpackb(raw), cap=False))


@state.command("rm")
@CONFIG_OPT
@SESSION_OPT
@click.argument("plugin")
@click.argument("key")
def rm(config: Path | None, session: str | None, plugin: str, key: str) -> None:
    """Delete one key."""
    with _store(_default_config(config)) as store:
        existed = store.delete(_scope(plugin, session), key)
    if not existed:  # like `state get`: a missing key is a failure a script can see
        not_found(f"no key {key!r} for {_scope(plugin, session)}")
    click.echo("deleted")


@state.command("export")
@CONFIG_OPT
@click.option("--format", "fmt", type=click.Choice(["msgpack", "json"]), default=None,
              help="Default: from the -o FILE's extension, as `import` reads it (.json; "
                   ".msgpack/.mpk), else msgpack.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="File to write (default: standard output).")
def export(config: Path | None, fmt: Literal["msgpack", "json"] | None,
           output: Path | None) -> None:
    """Write every entry (for backups and moves between backends).

    MessagePack is binary: it goes to a file (-o) or a pipe, never to a terminal.
    """
    if fmt is None:  # `export -o backup.json` then `import backup.json` must agree
        fmt = FORMAT_BY_SUFFIX.get(output.suffix.lower(), "msgpack") if output else "msgpack"
    if output is None and fmt == "msgpack" and sys.stdout.isatty():
        raise click.UsageError("refusing to write binary MessagePack to a terminal; "
                               "use -o FILE, a pipe, or --format json")
    with _store(_default_config(config)) as store:
        data = store.export_state(fmt)
    if output is None:
        sys.stdout.buffer.write(data)
    else:
        from wasmext.files import atomic_write

        atomic_write(output, data)  # a kill leaves the old backup whole, never a torn one
        click.echo(f"exported {len(data)} bytes to {output}", err=True)


@state.command("import")
@CONFIG_OPT
@click.option("--format", "fmt", type=click.Choice(["msgpack", "json"]), default=None,
              help="Default: from SOURCE's extension (.json, .msgpack/.mpk).")
@click.option("--replace", is_flag=True, help="Drop existing state of the imported plugins.")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def import_(config: Path | None, fmt: Literal["msgpack", "json"] | None, replace: bool,
            source: Path) -> None:
    """Load entries written by `wasmext state export`."""
    if fmt is None:
        fmt = FORMAT_BY_SUFFIX.get(source.suffix.lower())
        if fmt is None:
            raise click.BadParameter(f"cannot tell the format of {source.name!r} from its "
                                     "extension; give --format json or msgpack",
                                     param_hint="--format")
    with _store(_default_config(config)) as store:
        try:
            count = store.import_state(source.read_bytes(), fmt, replace=replace)
        except WasmextError as err:
            _fail(err, EXIT_USAGE)
    click.echo(f"imported {count} entries")
