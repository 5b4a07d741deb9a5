"""`wasmext mcp ...`: the host's plugin tools over the Model Context Protocol."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from wasmext.errors import ConfigError, WasmextError
from wasmext_cli.common import (
    CONFIG_OPT,
    EXIT_FAULT,
    EXIT_USAGE,
    PLUGINS_OPT,
    _attach_remote,
    _default_config,
    _fail,
    _host,
    load_error_lines,
    started,
)
from wasmext_cli.group import error_line


@click.group()
def mcp() -> None:
    """Serve (or inspect) tools over MCP."""


def _nothing_to_serve(host: Any, include_host_tools: bool, include_mcp_tools: bool,
                      include_mcp_catalog: bool, watch: bool) -> tuple[str, bool] | None:
    """(what to tell the operator, whether serving is pointless) when the server would
    start with nothing at all to serve, else None.

    A loaded plugin may serve resources or prompts without a tool, so any plugin is
    something; a folder being watched may yet get one, so that is only a notice."""
    owners = {tool.owner.partition(":")[0] for tool in host.tools.tools.values()}
    if host.plugins or "plugin" in owners or (include_host_tools and "host" in owners) \
            or (include_mcp_tools and "mcp" in owners):
        return None
    if include_mcp_catalog and host.config.mcp_enabled:
        return None
    looked = [str(folder) for _source, folder in host.plugin_dirs]
    folders = [f for _source, f in host.plugin_dirs if Path(f).is_dir()]
    if folders and watch:
        return (f"nothing to serve yet: no plugin in {', '.join(map(str, folders))}; "
                "serving and watching it for plugins", False)
    where = f"looked in {', '.join(looked)}" if looked else "no plugin folder configured"
    return (f"nothing to serve: no plugin loaded and no tool ({where}); name a folder of "
            "plugins with --plugins DIR or [plugins] workspace_dir in wasmext.toml", True)


@mcp.command()
@CONFIG_OPT
@PLUGINS_OPT
@click.option("--http", "port", type=click.IntRange(1, 65535),
              help="Serve streamable HTTP on PORT (at /mcp) instead of stdio.")
@click.option("--host", "address", default="127.0.0.1", show_default=True,
              help="Address to bind with --http (loopback unless you mean it).")
@click.option("--include-host-tools", is_flag=True, help="Also list the host's Python tools.")
@click.option("--include-mcp-tools", is_flag=True,
              help="Also list the configured MCP servers' tools (a gateway).")
@click.option("--include-mcp-catalog", is_flag=True,
              help="Also serve the configured MCP servers' resources and prompts.")
@click.option("--token-file", type=click.Path(path_type=Path),
              help="--http: require this file's bearer token (needed off loopback).")
@click.option("--token-env", metavar="VAR",
              help="--http: require the bearer token in environment variable VAR.")
@click.option("--poll", "poll_interval", type=click.FloatRange(0), default=1.0,
              show_default=True, help="Seconds between tool-set change checks (0: off).")
@click.option("--watch/--no-watch", default=True, show_default=True,
              help="Rescan plugins when their folders or enable state change.")
@click.option("--manage", is_flag=True,
              help="Also serve the management tools: list, grants, enable, disable, load "
                   "(granting stays the operator's; docs/mcp-manage.md).")
@click.option("--manage-source", "manage_sources", multiple=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A folder clients may load plugins from (beside [manage] sources). "
                   "Repeatable.")
@click.option("--manage-registry", "manage_registries", multiple=True, metavar="PATTERN",
              help="An oci:// REGISTRY/NAME pattern clients may load plugins from (beside "
                   "[manage] registries), e.g. 127.0.0.1:5000/team/*. Repeatable.")
@click.option("--nats", "nats_url", metavar="URL",
              help="The NATS server whose workers serve the config's [remote.ID] plugins "
                   "(default: [nats] url or WASMEXT_NATS_URL), as for wasmext run.")
def serve(config: Path | None, plugin_dirs: tuple[Path, ...], port: int | None, address: str,
          include_host_tools: bool, include_mcp_tools: bool, include_mcp_catalog: bool,
          token_file: Path | None,
          token_env: str | None, poll_interval: float, watch: bool, manage: bool,
          manage_sources: tuple[Path, ...], manage_registries: tuple[str, ...],
          nats_url: str | None) -> None:
    """Serve the plugins' tools over MCP (stdio by default)."""
    import dataclasses
    import logging  # here, so that `--help` starts fast
    from contextlib import nullcontext

    from wasmext.lifecycle.watch import PluginWatcher
    from wasmext.mcp.server.auth import load_token, require_token_for
    from wasmext.mcp.server.serve import serve_http, serve_stdio

    # stdout is the protocol channel on stdio: everything else goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("wasmext.mcp.audit").setLevel(logging.INFO)
    # Which tools' hints are withheld and how to vouch: the operator's to read and act on.
    logging.getLogger("wasmext.mcp.hints").setLevel(logging.INFO)
    try:
        token = load_token(token_file, token_env) if port is not None else None
        if port is not None:
            require_token_for(address, token)
        host = _host(_default_config(config), plugin_dirs,
                     (token_env,) if token_env else ())
        _attach_remote(host, nats_url)  # [remote.ID]: plugins workers serve, their tools
    except WasmextError as err:
        # An unusable config (or token) is 2, as in every command; a server not reached 1.
        _fail(err, EXIT_USAGE if isinstance(err, ConfigError) else EXIT_FAULT)
    for problem in host.load_errors:
        click.echo(error_line(problem), err=True)  # "wasmext: " once
    settings = host.config.manage
    settings = dataclasses.replace(settings, sources=settings.sources + manage_sources,
                                   registries=settings.registries + manage_registries) \
        if manage or settings.enabled else None
    with host, (PluginWatcher(host) if watch else nullcontext()):
        said = len(host.load_errors)
        host.start_mcp()  # MCP servers from the config: their tools are callable by plugins
        # A plugin's own server it may not run (no grant, a contested name) is known only
        # now: the operator of a server reads stderr at start, or never.
        for problem in host.load_errors[said:]:
            click.echo(error_line(problem), err=True)
        started(host)
        empty = _nothing_to_serve(host, include_host_tools, include_mcp_tools,
                                  include_mcp_catalog, watch)
        if empty is not None and settings is None:
            message, final = empty
            click.echo(f"wasmext: {message}", err=True)
            if final:
                sys.exit(EXIT_USAGE)
        if port is None:
            serve_stdio(host, include_host_tools=include_host_tools,
                        include_mcp_tools=include_mcp_tools, poll_interval=poll_interval,
                        include_mcp_catalog=include_mcp_catalog, manage=settings)
        else:
            click.echo(f"wasmext: MCP on http://{address}:{port}/mcp", err=True)
            serve_http(host, address, port, include_host_tools=include_host_tools,
                       include_mcp_tools=include_mcp_tools, poll_interval=poll_interval,
                       include_mcp_catalog=include_mcp_catalog, token=token,
                       manage=settings)


@mcp.command("ls")
@CONFIG_OPT
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
def ls(config: Path | None, as_json: bool) -> None:
    """Connect the configured MCP servers and show their status and tools."""
    import json

    host = _host(_default_config(config), ())
    with host:
        clients = host.start_mcp()
        servers = clients.servers() if clients is not None else []
        if not host.config.mcp_enabled:
            servers = [{"name": s.name, "transport": s.transport, "status": "disabled (mcp off)",
                        "tools": []} for s in host.config.mcp_servers]
        # Why a plugin's own server is not here (no grant, a contested name) is a load
        # error: without it the operator read "none configured" and nothing else.
        problems = load_error_lines(host)
    for line in problems:
        click.echo(line, err=True)
    if as_json:
        click.echo(json.dumps(servers, indent=2))
        return
    if not servers:
        click.echo("no MCP servers configured ([mcp.servers.NAME] in wasmext.toml, or a "
                   "plugin's own with the grant mcp-server:NAME)")
    for server in servers:
        click.echo(f"{server['name']:<16} {server['transport']:<6} {server['status']}")
        for tool in server["tools"]:
            click.echo(f"    {tool}")


def _oauth_target(config: Path | None, server: str) -> tuple[Any, Path]:
    """SERVER's spec (it must have an oauth table) and the folder of its tokens."""
    from wasmext import HostConfig, load_config
    from wasmext.mcp.oauth.login import oauth_folder, oauth_spec

    path = _default_config(config)
    try:
        cfg = load_config(path) if path else HostConfig()
        return oauth_spec(cfg, server), oauth_folder(cfg)
    except WasmextError as err:
        _fail(err)


@mcp.command()
@CONFIG_OPT
@click.argument("server")
def login(config: Path | None, server: str) -> None:
    """Authorize wasmext at SERVER (an [mcp.servers.SERVER.oauth] table) now."""
    from wasmext.mcp.oauth.login import login as run_login

    spec, folder = _oauth_target(config, server)
    try:
        stored = run_login(spec, folder)
    except WasmextError as err:
        _fail(err)
    click.echo(f"mcp server {server}: authorized; tokens stored in {stored}")


@mcp.command()
@CONFIG_OPT
@click.argument("server")
def logout(config: Path | None, server: str) -> None:
    """Forget the OAuth tokens stored for SERVER (it authorizes again next time)."""
    from wasmext.mcp.oauth.login import logout as run_logout

    _spec, folder = _oauth_target(config, server)
    removed = run_logout(folder, server)
    click.echo(f"mcp server {server}: " + ("tokens removed" if removed
                                          else "no tokens were stored"))
