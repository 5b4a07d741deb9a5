"""The commands about one plugin or the installed set: `call`, `inspect`, `limits`,
`list`, `enable`, `disable` and `new`."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import textwrap
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from wasmext.errors import GuestTrap, WasmextError
from wasmext.text import CAP, bounded_tree, json_safe
from wasmext_cli.common import (
    CONFIG_OPT,
    EXIT_FAULT,
    EXIT_USAGE,
    PLUGINS_OPT,
    _attach_remote,
    _default_config,
    _dumps,
    _echo_json,
    _fail,
    _host,
    _jsonable,
    _line,
    absolute_fs_grant,
    echo_plugin_logs,
    host_warnings,
    load_error_lines,
    looked_in,
    must_exist,
    not_found,
    note_if_stale,
    setting_value,
    show_notices,
)
from wasmext_cli.languages import SCAFFOLD_LANGUAGES


def _parse_settings(pairs: tuple[str, ...], plugin: Path) -> dict[str, Any]:
    """The --set values, each checked against the folder's manifest: a setting it does
    not declare, or a value not of its type, is a bad argument (EXIT_USAGE), said as
    the host says it."""
    manifest = None
    if plugin.is_dir():  # a folder's manifest says which settings there are, and their types
        from wasmext.manifest import load_folder

        with contextlib.suppress(WasmextError):  # loading it reports the manifest's errors
            manifest = load_folder(plugin)
    types = {s.name: s.type for s in manifest.settings} if manifest is not None else {}
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--set")
        out[name] = setting_value(raw, types.get(name))
        if manifest is not None:
            from wasmext.operator_settings import check_value

            try:
                check_value(manifest, name, out[name])
            except WasmextError as err:
                _fail(err, EXIT_USAGE)
    return out


# How a guest's dying words read in each language: Rust's and Zig's panic handlers,
# AssemblyScript's abort, C's assert, Go's runtime panic.
# `inspect --json` is at most this long, as long as the largest registration the
# default host accepts (max_output_bytes): a registration of many tiny values (an
# empty map is one byte of MessagePack, an indented line of JSON) cannot make it larger.
INSPECT_JSON_CHARS = 1 << 20
# `inspect` prints one line per registration key it does not know (each cut to a line).
INSPECT_EXTRA_LINES = 64
LAST_WORDS = re.compile(r"panic|abort|assert|fatal|exception|error", re.IGNORECASE)


def _with_last_words(err: WasmextError, lines: Iterable[Any], since: float) -> WasmextError:
    """A trap whose message names what the plugin said as it died.

    A panic traps with `unreachable`, which says nothing; the message went to the
    plugin log (its log import or WASI stderr) just before. That line, already
    redacted and cleaned by the plugin log, leads the message, so it survives the
    one error line's length cap.
    """
    if not isinstance(err, GuestTrap):
        return err
    said = [ln.text for ln in lines
            if ln.time >= since and (ln.source == "stderr" or ln.level in ("error", "warn"))]
    if not said:
        return err
    words = next((text for text in said if LAST_WORDS.search(text)), said[-1])
    err.message = f"{words} ({err.message})"
    err.args = (err.message,)
    return err


@click.command()
@click.argument("plugin", type=click.Path(path_type=Path))
@click.argument("hook")
@click.option("--data", "data_json", default="null", help="The hook's data, as JSON.")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="A plugin setting (JSON value or bare string; a string "
                   "setting takes the text as typed). Repeatable.")
@click.option("--grant", "grants", multiple=True, metavar="CAPABILITY",
              help="Grant a capability for this call (fs:FOLDER[:rw] shows a folder at "
                   "/NAME; read-only to a component even with :rw). Repeatable.")
@click.option("--fuel", type=click.IntRange(min=1),
              help="Fuel for the hook call (loading the plugin, its registration "
                   "included, keeps the host's default fuel).")
@click.option("--memory-mb", type=click.IntRange(min=1, max=4095), help="Linear memory cap.")
@click.option("--timeout-ms", type=click.IntRange(min=1),
              help="Wall-clock deadline of the hook call (loading the plugin, its "
                   "registration included, keeps the host's default deadline).")
@click.option("--log/--no-log", "show_log", default=False,
              help="Print the plugin's log lines to stderr.")
def call(plugin: Path, hook: str, data_json: str, settings: tuple[str, ...],
         grants: tuple[str, ...], fuel: int | None, memory_mb: int | None,
         timeout_ms: int | None, show_log: bool) -> None:
    """Call HOOK of PLUGIN (a plugin folder or a .wasm file) and print its value as JSON.

    The plugin runs in a throwaway host and a session of its own: state (session and
    plugin scope) lives in memory and events stay on an in-process bus, all gone when
    the command ends; --grant state (or any other capability) lets the plugin use them.
    """
    must_exist(plugin, "plugin folder or module file")
    try:
        data = json.loads(data_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--data") from exc
    limits: dict[str, int] = {}
    if memory_mb is not None:
        limits["memory_bytes"] = memory_mb * 2**20
    # The call's bounds: loading the plugin, its registration included, keeps the host's
    # defaults (a cheap hook of a costly start-up runs).
    call_limits = {name: value for name, value in (("fuel_per_call", fuel),
                                                   ("timeout_ms", timeout_ms))
                   if value is not None}
    from wasmext.capabilities import capability_problem
    from wasmext_cli.call_host import throwaway_host
    from wasmext_cli.ui import show_compiles

    grants = tuple(absolute_fs_grant(g) for g in grants)
    for grant in grants:  # a typo would be a grant nothing checks: refused, as `wasmext grant`
        problem = capability_problem(grant)
        if problem is not None:
            raise click.BadParameter(problem, param_hint="--grant")
    note_if_stale(plugin)
    show_compiles()
    with throwaway_host() as host:
        try:
            loaded = host.add(plugin, limits=limits, settings=_parse_settings(settings, plugin),
                              grants=list(grants))
        except WasmextError as err:
            _fail(err)
        if call_limits:
            from wasmext.sandbox.limits import effective_limits

            # As a load's limits: the manifest's [limits] may lower them, the policy caps them.
            effective = effective_limits(host.runtime.defaults, loaded.requested_limits,
                                         call_limits, host.runtime.policy).as_dict()
            loaded.set_call_limits(**{name: effective[name] for name in call_limits})
        started = time.time()
        try:
            result = loaded.call(hook, data, _one_call_session(host, loaded, hook))
        except WasmextError as err:
            if getattr(err, "hook", None) is None:
                err.hook = hook  # name the hook the user called, never "hook None"
            _fail(_with_last_words(err, loaded.log.lines, started))
        finally:
            if show_log:
                echo_plugin_logs([loaded.log])
    # The hook's answer is data: not cut, but nothing in it can drive the terminal.
    click.echo(_dumps(result.value, cap=False))


CALL_SESSION = "wasmext-call"  # the session id of `wasmext call`


def _one_call_session(host: Any, loaded: Any, hook: str) -> dict[str, Any]:
    """The call's `meta`: a session of its own (the SDKs' state wrappers default to the
    session scope, which a call without one refused), never started or ended, so no
    session_start or session_end hook runs; minor-1 plugins get its context. One name
    for every call: each command's host is new, and notices name it."""
    from wasmext.session import Session

    session = Session(host, CALL_SESSION, {})
    meta: dict[str, Any] = {"session": session.id}
    if getattr(loaded.registration, "abi_minor", 0) >= 1:
        meta["context"] = session.hook_context(hook)
    return meta


@click.command()
@click.argument("plugin", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
def inspect(plugin: Path, as_json: bool) -> None:
    """Show what PLUGIN (a folder, a .wasm, or a .wxb bundle) registered, its ABI
    version, size, digest and limits."""
    must_exist(plugin, "plugin folder or module file")
    if plugin.suffix == ".wxb":  # checked and described, not installed
        from wasmext_cli.lifecycle_cmd import inspect_bundle

        inspect_bundle(plugin, as_json)
        return
    from wasmext.runtime import Runtime
    from wasmext_cli.ui import show_compiles

    note_if_stale(plugin)
    show_compiles()
    with Runtime() as rt:
        try:
            info = rt.load(plugin).describe()
            if plugin.is_dir():  # what `[grants.ID] manifest = ...` pins
                from wasmext.manifest import load_folder
                from wasmext.operator_settings import declared_settings

                manifest = load_folder(plugin)
                info["manifest_digest"] = manifest.source_digest
                # What it asks for, for the operator to weigh before `wasmext grant`.
                info["capabilities"] = list(manifest.asks_for)
                info["settings"] = declared_settings(manifest)
        except WasmextError as err:
            _fail(err)
    if as_json:
        click.echo(inspect_json(info))
        return
    click.echo(f"id        {info['id']}")
    click.echo(f"name      {_line(info['name'] or '-', 128)}  "
               f"version {_line(info['version'] or '-', 64)}")
    abi = info["abi"]
    click.echo(f"abi       {abi['major']}.{abi['minor']} (guest built for minor "
               f"{abi['guest_minor']})")
    click.echo(f"size      {info['size']} bytes")
    click.echo(f"digest    {info['digest']}")
    if "manifest_digest" in info:
        click.echo(f"manifest  {info['manifest_digest']} (plugin.toml)")
    # A component imports dozens of WASI functions: wrapped, not one 1,500-column line.
    imports = textwrap.wrap(_line(", ".join(info["imports"]) or "-"), 100,
                            break_on_hyphens=False) or ["-"]
    click.echo(f"imports   {imports[0]}")
    for more in imports[1:]:
        click.echo(f"          {more}")
    if "capabilities" in info:
        click.echo(f"asks for  {_line(', '.join(info['capabilities']) or '-')} "
                   "(manifest capabilities and MCP servers; granted only by the operator)")
        if "fs" in info["capabilities"] and info.get("backend") == "component":
            click.echo("          a component sees a granted folder read-only, even "
                       "granted rw (the [fs] quota cannot bound its writes)")
    click.echo("hooks")
    for h in info["hooks"]:
        pattern = f"  pattern {_line(h['pattern'], 256)}" if h["pattern"] else ""
        click.echo(f"  {_line(h['hook'], 128):<24} priority {h['priority']}{pattern}")
    for i, (key, value) in enumerate(info["extra"].items()):
        if i == INSPECT_EXTRA_LINES:
            click.echo(f"…         {len(info['extra']) - i} more registration keys not shown "
                       "(inspect --json shows them)")
            break
        # Only what one line can show is walked (a value may be 300,000 nested maps).
        shown, _ = bounded_tree(_jsonable(value), 4 * CAP)
        click.echo(_line(f"{_line(key, 64):<9} {_dumps(shown)}"))
    if info.get("settings"):
        click.echo("settings  (name, type, default; sensitive defaults masked)")
        for s in info["settings"]:
            flags = "".join([" sensitive" if s["sensitive"] else "",
                             " required" if s["required"] else "",
                             f" env={_line(s['env'], 64)}" if s["env"] else ""])
            click.echo(f"  {_line(s['name'], 64):<24} {s['type'] or '-':<8} "
                       f"{_dumps(s['default'])}{flags}")
    requested = info["limits"]["requested"]
    click.echo("limits    requested -> effective (the manifest may only lower the host's)")
    for name, value in info["limits"]["effective"].items():
        click.echo(f"  {name:<24} {requested.get(name, '-')!s:>12} -> {value}")


def inspect_json(info: dict[str, Any]) -> str:
    """`inspect --json`: every string cleaned and cut, the whole at most
    INSPECT_JSON_CHARS; `truncated` says what was left out (False: nothing)."""
    # The host's own facts first; what a plugin or its manifest writes at length last,
    # so a hostile registration crowds out only its own entries.
    last = [key for key in ("capabilities", "settings", "extra") if key in info]
    doc = {key: value for key, value in info.items() if key not in last}
    doc.update((key, info[key]) for key in last)
    note = 128  # room for the `truncated` entry itself
    tree, omitted = bounded_tree(_jsonable(doc), INSPECT_JSON_CHARS - note)
    tree["truncated"] = {"omitted_entries": omitted, "max_chars": INSPECT_JSON_CHARS} \
        if omitted else False
    return json_safe(json.dumps(tree, indent=2, ensure_ascii=False))


@click.command()
def limits() -> None:
    """Print the default sandbox limits."""
    from wasmext.sandbox.limits import Limits

    for name, value in Limits().as_dict().items():
        click.echo(f"{name:<24} {value}")


@click.command("list")
@CONFIG_OPT
@PLUGINS_OPT
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.option("--settings", "show_settings", is_flag=True,
              help="Show each plugin's settings and where each value came from "
                   "(sensitive values masked).")
@click.option("--nats", "nats_url", metavar="URL",
              help="The NATS server whose workers serve the config's [remote.ID] plugins "
                   "(default: [nats] url or WASMEXT_NATS_URL), as for wasmext run.")
def list_plugins(config: Path | None, plugin_dirs: tuple[Path, ...], as_json: bool,
                 show_settings: bool, nats_url: str | None) -> None:
    """List loaded plugins and the effective order of every hook.

    Disabled plugins are listed too, marked disabled. Plugins that did not load
    are named on stderr. Exit code: 0 when it listed
    plugins (even if others had problems) or found none; 1 when every plugin it
    found failed to load; 2 when the config cannot be read.
    """
    # Plugins that did not load are printed below, one line each; the library's
    # own log lines about them would only repeat that on stderr.
    import logging  # here, so that `--help` starts fast

    from wasmext_cli.ui import show_compiles

    logging.getLogger("wasmext").addHandler(logging.NullHandler())
    show_notices()  # a setting's environment variable the operator did not allow
    show_compiles()
    config = _default_config(config)
    try:
        host = _host(config, plugin_dirs)
    except WasmextError as err:
        _fail(err, EXIT_USAGE)
    with host:
        unreached = _list_remote(host, nats_url)
        order = {hook: [{"plugin": e.plugin_id, "priority": e.priority, "source": e.source,
                         "pattern": e.pattern} for e in entries]
                 for hook, entries in host.order_table().items()}
        plugins = [{"id": lp.id, "source": lp.source, "failure": lp.failure,
                    "digest": f"sha256:{lp.plugin.module.info.digest}", "enabled": True,
                    "capabilities": list(lp.manifest.asks_for) if lp.manifest else [],
                    "grants": sorted(lp.plugin.grants),
                    **({"settings": host.settings_of(lp.id)} if show_settings else {})}
                   for lp in host.plugins.values()]
        disabled = [{"id": pid, "source": "-", "failure": "-", "digest": None,
                     "enabled": False} for pid in sorted(host.disabled)]
        unasked = [f"{pid}: a [remote] plugin, and no NATS server to ask its worker "
                   "(--nats URL, [nats] url or WASMEXT_NATS_URL)" for pid in unreached]
        errors = [err.describe() for err in host.load_errors] + unasked
        error_lines = load_error_lines(host) + [f"not loaded: {_line(line)}"
                                                for line in unasked]
        warnings = host_warnings(host)
    if as_json:
        _echo_json({"plugins": plugins + disabled, "order": order, "errors": errors,
                    "warnings": warnings})
        return
    from wasmext_cli.ui import print_list_table

    if not print_list_table(plugins + disabled, order):  # a table on a terminal, else lines
        for p in plugins:
            asks = ",".join(p["capabilities"]) or "-"
            click.echo(_line(f"{p['id']:<20} {p['source']:<10} failure={p['failure']} "
                             f"asks={asks}"))
        for p in disabled:
            click.echo(_line(f"{p['id']:<20} disabled   (wasmext enable {p['id']})"))
        for hook, entries in order.items():
            chain = " -> ".join(f"{e['plugin']}({e['priority']})" for e in entries)
            click.echo(f"  {_line(hook, 128):<22} {_line(chain)}")
    if show_settings:
        for p in plugins:
            for s in p["settings"]:
                click.echo(_line(f"  {p['id']}.{s['name']} = {_dumps(s['value'])} "
                                 f"({s['source']}{', sensitive' if s['sensitive'] else ''})"))
    for line in error_lines:
        click.echo(line, err=True)
    for note in warnings:
        click.echo(f"warning: {note}", err=True)
    if config is None and not plugin_dirs:
        hint = " (./plugins exists: wasmext list --plugins plugins)" \
            if Path("plugins").is_dir() else ""
        click.echo(f"looked at no plugin folder: no ./wasmext.toml and no --plugins{hint}",
                   err=True)
    elif not plugins and not disabled:
        looked = ", ".join(str(d) for d in plugin_dirs) or f"the folders {config} names"
        # --plugins names a folder OF plugin folders; a plugin project is one itself.
        itself = [d for d in plugin_dirs if (d / "plugin.toml").is_file()]
        hint = f" ({_line(str(itself[0]))} is itself a plugin folder: --plugins takes the " \
            f"folder holding plugin folders, such as {_line(str(itself[0].resolve().parent))})" \
            if itself else ""
        click.echo(f"no plugin loaded from {_line(looked)}{hint}", err=True)
    if errors and not plugins:
        sys.exit(EXIT_FAULT)


def _list_remote(host: Any, url: str | None = None) -> list[str]:
    """Proxies for the config's [remote.ID] plugins, so `list` shows what their workers
    advertise; without a NATS server to ask (`url`, [nats] url, WASMEXT_NATS_URL), the
    ids it could not reach."""
    if not host.config.remote:
        return []
    if not (url or host.config.nats.with_env().url):
        return sorted(host.config.remote)
    _attach_remote(host, url)  # each worker that does not answer: a named load error
    return []


def _set_enabled(config: Path | None, plugin_id: str, enabled: bool,
                 purge_state: bool = False) -> None:
    from wasmext import HostConfig, load_config
    from wasmext.config import EnableState
    from wasmext.manifest import ID_RE

    if not ID_RE.match(plugin_id):
        raise click.BadParameter(f"{plugin_id!r} is not a plugin id", param_hint="PLUGIN_ID")
    try:
        cfg = load_config(config) if config else HostConfig()
    except WasmextError as err:
        _fail(err, EXIT_USAGE)
    from wasmext.discovery import discover

    # Only a plugin the config's folders hold: a typo must not be remembered (nor make
    # the data folder) as if it were a plugin.
    found = {d.manifest.id for d in discover(cfg.plugin_dirs()) if d.manifest is not None}
    if plugin_id not in found:
        not_found(f"plugin {plugin_id} is not installed{looked_in(cfg)}")
    EnableState(cfg).set(plugin_id, enabled)
    purged = ""
    if purge_state:
        from wasmext.config import open_store

        try:
            with open_store(cfg) as store:
                purged = f"; {store.drop_plugin(plugin_id)} state entries purged"
        except WasmextError as err:
            _fail(err)
    click.echo(f"{plugin_id} {'enabled' if enabled else 'disabled'} "
               f"(saved in {EnableState(cfg).path}){purged}")


@click.command()
@click.argument("plugin_id")
@CONFIG_OPT
def enable(plugin_id: str, config: Path | None) -> None:
    """Enable PLUGIN_ID (remembered across restarts)."""
    _set_enabled(_default_config(config), plugin_id, True)


@click.command()
@click.argument("plugin_id")
@CONFIG_OPT
@click.option("--purge-state", is_flag=True,
              help="Also delete its state, in every scope (kept by default).")
def disable(plugin_id: str, config: Path | None, purge_state: bool) -> None:
    """Disable PLUGIN_ID (remembered across restarts)."""
    _set_enabled(_default_config(config), plugin_id, False, purge_state)


@click.command()
@click.argument("name")
@click.option("--lang", required=True, type=click.Choice(SCAFFOLD_LANGUAGES))
@click.option("--dir", "parent", default=".", show_default=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Where to create the project folder.")
@click.option("--package", is_flag=True,
              help="Add a pyproject.toml that ships the plugin as a Python wheel "
                   "(a wasmext.plugins entry point).")
def new(name: str, lang: str, parent: Path, package: bool) -> None:
    """Create a plugin project NAME in LANG that builds and passes its test."""
    from wasmext_cli.scaffold import ScaffoldError, new_plugin

    try:
        folder = new_plugin(name, lang, parent, package=package)
    except ScaffoldError as exc:
        click.echo(f"wasmext: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    click.echo(f"created {folder}\n  cd {folder} && wasmext build && python -m pytest")

