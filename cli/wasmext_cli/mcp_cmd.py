"""`wasmext mcp ...`: the host's plugin tools over the Model Context Protocol."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

from wasmext import WasmextError
from wasmext_cli.common import CONFIG_OPT, PLUGINS_OPT, _default_config, _fail, _host


@click.group()
def mcp() -> None:
    """Serve (or inspect) tools over MCP."""


@mcp.command()
@CONFIG_OPT
@PLUGINS_OPT
@click.option("--http", "port", type=click.IntRange(1, 65535),
              help="Serve streamable HTTP on PORT (at /mcp) instead of stdio.")
@click.option("--host", "address", default="127.0.0.1", show_default=True,
              help="Address to bind with --http (loopback unless you mean it).")
@click.option("--include-host-tools", is_flag=True, help="Also list the host's Python tools.")
@click.option("--poll", "poll_interval", type=click.FloatRange(0), default=1.0,
              show_default=True, help="Seconds between tool-set change checks (0: off).")
def serve(config: Path | None, plugin_dirs: tuple[Path, ...], port: int | None, address: str,
          include_host_tools: bool, poll_interval: float) -> None:
    """Serve the plugins' tools over MCP (stdio by default)."""
    from wasmext.mcp_server import serve_http, serve_stdio

    # stdout is the protocol channel on stdio: everything else goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("wasmext.mcp.audit").setLevel(logging.INFO)
    try:
        host = _host(_default_config(config), plugin_dirs)
    except WasmextError as err:
        _fail(err)
    for problem in host.load_errors:
        click.echo(f"wasmext: {problem.describe()}", err=True)
    with host:
        if port is None:
            serve_stdio(host, include_host_tools=include_host_tools,
                        poll_interval=poll_interval)
        else:
            click.echo(f"wasmext: MCP on http://{address}:{port}/mcp", err=True)
            serve_http(host, address, port, include_host_tools=include_host_tools,
                       poll_interval=poll_interval)
