"""`wasmext config set` / `unset`: a plugin's settings, checked, saved for the next start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from wasmext.errors import WasmextError
from wasmext_cli.common import (
    CONFIG_OPT,
    EXIT_USAGE,
    PLUGINS_OPT,
    _default_config,
    _dumps,
    _fail,
    _line,
    looked_in,
    not_found,
    setting_value,
)
from wasmext_cli.group import WasmextGroup


@click.group(cls=WasmextGroup)
def config() -> None:
    """Set a plugin's settings (checked against its plugin.toml, saved atomically).

    Values go to <data_dir>/settings.json and are layered over the config's
    [plugin.ID] settings; they take effect when the plugin next loads (a start,
    a rescan, a reload).
    """


def _target(config_path: Path | None, plugin_dirs: tuple[Path, ...], plugin_id: str
            ) -> tuple[Any, Any]:
    """(the settings file, the manifest of `plugin_id` in the plugin folders)."""
    from wasmext import HostConfig, load_config
    from wasmext.discovery import discover
    from wasmext.operator_settings import SettingsFile

    config_path = _default_config(config_path)
    try:
        cfg = load_config(config_path) if config_path else HostConfig()
    except WasmextError as err:
        _fail(err, EXIT_USAGE)
    dirs = [("workspace", d) for d in plugin_dirs] if plugin_dirs else cfg.plugin_dirs()
    found = {d.manifest.id: d.manifest for d in discover(dirs) if d.manifest is not None}
    if plugin_id not in found:  # a typo is never remembered as if it were a plugin
        not_found(f"plugin {_line(plugin_id, 64)} is not installed"
                  f"{looked_in(cfg, dirs, plugins_option=True)}")
    return SettingsFile(cfg.data_dir), found[plugin_id]


@config.command("set")
@click.argument("plugin_id")
@click.argument("key")
@click.argument("value")
@CONFIG_OPT
@PLUGINS_OPT
def set_value(plugin_id: str, key: str, value: str, config: Path | None,
              plugin_dirs: tuple[Path, ...]) -> None:
    """Set PLUGIN_ID's setting KEY to VALUE (JSON, or a bare word as a string; for a
    string setting, the text as typed).

    Refused, naming the field, when KEY is not a declared setting or VALUE is not
    of its type (`"many"` for an integer setting).
    """
    settings, manifest = _target(config, plugin_dirs, plugin_id)
    declared = next((s.type for s in manifest.settings if s.name == key), None)
    parsed = setting_value(value, declared)
    from wasmext.operator_settings import check_value

    try:  # a KEY it does not declare, or a VALUE not of its type: bad arguments
        check_value(manifest, key, parsed)
    except WasmextError as err:
        _fail(err, EXIT_USAGE)
    try:
        settings.set(manifest, key, parsed)
    except WasmextError as err:
        _fail(err)
    sensitive = any(s.name == key and s.sensitive for s in manifest.settings)
    shown = "********" if sensitive else _dumps(parsed)
    # `wasmext call` runs a throwaway host that reads no saved settings: said here, or the
    # next `call` answering with the old value looks like the set did not take.
    click.echo(_line(f"{plugin_id}.{key} = {shown} (saved in {settings.path}; used when the "
                     "plugin next loads under this config: run, mcp serve, worker; "
                     "`wasmext call` takes --set instead)"))


@config.command("unset")
@click.argument("plugin_id")
@click.argument("key")
@CONFIG_OPT
@PLUGINS_OPT
def unset_value(plugin_id: str, key: str, config: Path | None,
                plugin_dirs: tuple[Path, ...]) -> None:
    """Forget the value `config set` gave PLUGIN_ID's setting KEY.

    A KEY the plugin does not declare and that has no saved value is a typo: refused as
    `config set` refuses it (exit 2), not "was not set" while the meant one stays set.
    """
    settings, manifest = _target(config, plugin_dirs, plugin_id)
    try:
        had = settings.unset(plugin_id, key)
    except WasmextError as err:
        _fail(err)
    if not had and all(s.name != key for s in manifest.settings):
        from wasmext.operator_settings import check_value

        try:  # a value saved for a setting since removed from plugin.toml is still unset
            check_value(manifest, key, None)
        except WasmextError as err:
            _fail(err, EXIT_USAGE)
    click.echo(_line(f"{plugin_id}.{key}: " + ("unset" if had else "was not set")))
