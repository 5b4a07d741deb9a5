"""What the commands share: exit codes, common options, error printing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from wasmext import WasmextError

EXIT_FAULT = 1
EXIT_USAGE = 2


def _jsonable(value: Any) -> Any:
    """JSON has no bytes: they print as {"$bin": hex}, as in abi/vectors."""
    if isinstance(value, bytes):
        return {"$bin": value.hex()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _fail(err: WasmextError, code: int = EXIT_FAULT) -> NoReturn:
    click.echo(f"wasmext: {err.describe()}", err=True)
    sys.exit(code)


def _host(config: Path | None, plugin_dirs: tuple[Path, ...]) -> Any:
    from wasmext import Host, HostConfig, load_config

    cfg = load_config(config) if config else HostConfig()
    dirs = [("workspace", d) for d in plugin_dirs] if plugin_dirs else None
    return Host(cfg, plugin_dirs=dirs)


CONFIG_OPT = click.option("--config", "config", type=click.Path(exists=True, dir_okay=False,
                                                                   path_type=Path),
                          help="A wasmext.toml (default: ./wasmext.toml if present).")
PLUGINS_OPT = click.option("--plugins", "plugin_dirs", multiple=True,
                           type=click.Path(exists=True, file_okay=False, path_type=Path),
                           help="A plugin directory (instead of the config's). Repeatable.")


def _default_config(config: Path | None) -> Path | None:
    if config is None and Path("wasmext.toml").is_file():
        return Path("wasmext.toml")
    return config
