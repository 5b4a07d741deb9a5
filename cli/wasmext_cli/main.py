"""The `wasmext` command line."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from wasmext import Runtime, WasmextError
from wasmext.sandbox.limits import Limits
from wasmext_cli.build import BuildError, build_plugin
from wasmext_cli.common import (
    CONFIG_OPT,
    EXIT_FAULT,
    EXIT_USAGE,
    PLUGINS_OPT,
    _default_config,
    _dumps,
    _echo_json,
    _fail,
    _host,
    _line,
)


def _parse_settings(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--set")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw  # a bare word is a string
    return out


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wasmext")
def main() -> None:
    """Run sandboxed WebAssembly plugins."""


@main.command()
@click.argument("plugin", type=click.Path(exists=True, path_type=Path))
@click.argument("hook")
@click.option("--data", "data_json", default="null", help="The hook's data, as JSON.")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="A plugin setting (JSON value or bare string). Repeatable.")
@click.option("--grant", "grants", multiple=True, metavar="CAPABILITY",
              help="Grant a capability for this call. Repeatable.")
@click.option("--fuel", type=click.IntRange(min=1), help="Fuel per call.")
@click.option("--memory-mb", type=click.IntRange(min=1, max=4095), help="Linear memory cap.")
@click.option("--timeout-ms", type=click.IntRange(min=1), help="Wall-clock deadline.")
@click.option("--log/--no-log", "show_log", default=False,
              help="Print the plugin's log lines to stderr.")
def call(plugin: Path, hook: str, data_json: str, settings: tuple[str, ...],
         grants: tuple[str, ...], fuel: int | None, memory_mb: int | None,
         timeout_ms: int | None, show_log: bool) -> None:
    """Call HOOK of PLUGIN (a plugin folder or a .wasm file) and print its value as JSON."""
    try:
        data = json.loads(data_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--data") from exc
    limits: dict[str, int] = {}
    if fuel is not None:
        limits["fuel_per_call"] = fuel
    if memory_mb is not None:
        limits["memory_bytes"] = memory_mb * 2**20
    if timeout_ms is not None:
        limits["timeout_ms"] = timeout_ms
    with Runtime() as rt:
        try:
            loaded = rt.load(plugin, limits=limits, settings=_parse_settings(settings),
                             grants=grants)
            result = loaded.call(hook, data)
        except WasmextError as err:
            _fail(err)
        finally:
            if show_log and rt.plugins:
                for line in next(iter(rt.plugins.values())).log.lines:
                    click.echo(f"[{line.level}] {_line(line.text, 4096)}", err=True)
    # The hook's answer is data: not cut, but nothing in it can drive the terminal.
    click.echo(_dumps(result.value, cap=False))


@main.command()
@click.argument("plugin", type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
def inspect(plugin: Path, as_json: bool) -> None:
    """Show what PLUGIN registered, its ABI version, size, digest and limits."""
    with Runtime() as rt:
        try:
            info = rt.load(plugin).describe()
        except WasmextError as err:
            _fail(err)
    if as_json:
        _echo_json(info)
        return
    click.echo(f"id        {info['id']}")
    click.echo(f"name      {_line(info['name'] or '-', 128)}  "
               f"version {_line(info['version'] or '-', 64)}")
    abi = info["abi"]
    click.echo(f"abi       {abi['major']}.{abi['minor']} (guest built for minor "
               f"{abi['guest_minor']})")
    click.echo(f"size      {info['size']} bytes")
    click.echo(f"digest    {info['digest']}")
    click.echo(f"imports   {_line(', '.join(info['imports']) or '-')}")
    click.echo("hooks")
    for h in info["hooks"]:
        pattern = f"  pattern {_line(h['pattern'], 256)}" if h["pattern"] else ""
        click.echo(f"  {_line(h['hook'], 128):<24} priority {h['priority']}{pattern}")
    for key, value in info["extra"].items():
        click.echo(_line(f"{_line(key, 64):<9} {_dumps(value)}"))
    requested = info["limits"]["requested"]
    click.echo("limits    requested -> effective (the manifest may only lower the host's)")
    for name, value in info["limits"]["effective"].items():
        click.echo(f"  {name:<24} {requested.get(name, '-')!s:>12} -> {value}")


@main.command()
@click.argument("plugins", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
def build(plugins: tuple[Path, ...]) -> None:
    """Build each plugin folder (plugin.toml with a [build] table) into its .wasm."""
    for folder in plugins:
        try:
            result = build_plugin(folder)
        except (BuildError, WasmextError) as exc:
            click.echo(f"wasmext: {exc}", err=True)
            sys.exit(EXIT_FAULT)
        click.echo(f"built {result.wasm} ({result.wasm.stat().st_size} bytes)")


@main.command()
def limits() -> None:
    """Print the default sandbox limits."""
    for name, value in Limits().as_dict().items():
        click.echo(f"{name:<24} {value}")


@main.command("list")
@CONFIG_OPT
@PLUGINS_OPT
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
def list_plugins(config: Path | None, plugin_dirs: tuple[Path, ...], as_json: bool) -> None:
    """List loaded plugins and the effective order of every hook."""
    # Plugins that did not load are printed below, one line each; the library's
    # own log lines about them would only repeat that on stderr.
    logging.getLogger("wasmext").addHandler(logging.NullHandler())
    try:
        host = _host(_default_config(config), plugin_dirs)
    except WasmextError as err:
        _fail(err, EXIT_USAGE)
    with host:
        order = {hook: [{"plugin": e.plugin_id, "priority": e.priority, "source": e.source,
                         "pattern": e.pattern} for e in entries]
                 for hook, entries in host.order_table().items()}
        plugins = [{"id": lp.id, "source": lp.source, "failure": lp.failure,
                    "digest": f"sha256:{lp.plugin.module.info.digest}"}
                   for lp in host.plugins.values()]
        errors = [err.describe() for err in host.load_errors]
    if as_json:
        _echo_json({"plugins": plugins, "order": order, "errors": errors})
        return
    for p in plugins:
        click.echo(_line(f"{p['id']:<20} {p['source']:<10} failure={p['failure']}"))
    for hook, entries in order.items():
        chain = " -> ".join(f"{e['plugin']}({e['priority']})" for e in entries)
        click.echo(f"  {_line(hook, 128):<22} {_line(chain)}")
    for line in errors:
        click.echo(f"not loaded: {_line(line)}", err=True)


def _set_enabled(config: Path | None, plugin_id: str, enabled: bool) -> None:
    from wasmext import HostConfig, load_config
    from wasmext.config import EnableState
    from wasmext.manifest import ID_RE

    if not ID_RE.match(plugin_id):
        raise click.BadParameter(f"{plugin_id!r} is not a plugin id", param_hint="PLUGIN_ID")
    try:
        cfg = load_config(config) if config else HostConfig()
    except WasmextError as err:
        _fail(err, EXIT_USAGE)
    EnableState(cfg).set(plugin_id, enabled)
    click.echo(f"{plugin_id} {'enabled' if enabled else 'disabled'} "
               f"(saved in {EnableState(cfg).path})")


@main.command()
@click.argument("plugin_id")
@CONFIG_OPT
def enable(plugin_id: str, config: Path | None) -> None:
    """Enable PLUGIN_ID (remembered across restarts)."""
    _set_enabled(_default_config(config), plugin_id, True)


@main.command()
@click.argument("plugin_id")
@CONFIG_OPT
def disable(plugin_id: str, config: Path | None) -> None:
    """Disable PLUGIN_ID (remembered across restarts)."""
    _set_enabled(_default_config(config), plugin_id, False)


@main.command()
@click.argument("name")
@click.option("--lang", required=True, type=click.Choice(["c", "zig", "rust", "assemblyscript",
                                                           "go", "python", "javascript"]))
@click.option("--dir", "parent", default=".", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Where to create the project folder.")
def new(name: str, lang: str, parent: Path) -> None:
    """Create a plugin project NAME in LANG that builds and passes its test."""
    from wasmext_cli.scaffold import ScaffoldError, new_plugin

    try:
        folder = new_plugin(name, lang, parent)
    except ScaffoldError as exc:
        click.echo(f"wasmext: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    click.echo(f"created {folder}\n  cd {folder} && wasmext build . && python -m pytest")


from wasmext_cli.run_cmd import run, stats  # noqa: E402  (they use the helpers above)
from wasmext_cli.state_cmd import state  # noqa: E402

main.add_command(run)
main.add_command(stats)
main.add_command(state)

from wasmext_cli.mcp_cmd import mcp  # noqa: E402

main.add_command(mcp)
