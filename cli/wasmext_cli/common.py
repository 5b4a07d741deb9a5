"""What the commands share: exit codes, common options, error and text printing.

Whatever a plugin wrote (names, versions, hook names, error codes and messages,
state keys) reaches the terminal only through `_line` (one inert line of at
most `wasmext.text.CAP` characters) or `_echo_json` (every string cleaned and
capped, then any character a terminal would act on escaped as `\\uXXXX`).
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import click

from wasmext.errors import WasmextError
from wasmext.text import CAP, clean, clean_tree, json_safe

EXIT_FAULT = 1
EXIT_USAGE = 2
# A plugin (or a plugin's state key) a command is named and cannot find: a failure, as a
# plugin that fails is, never click's usage error (bad arguments, an unreadable config).
EXIT_NOT_FOUND = EXIT_FAULT


def setting_value(text: str, declared_type: str | None) -> Any:
    """A setting's value as typed on the command line: JSON, or the text itself when it is
    no JSON or the setting is a string (`--set greeting=1` means the text "1")."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text  # a bare word is a string
    return text if declared_type == "string" and not isinstance(value, str) else value


def absolute_fs_grant(capability: str) -> str:
    """`fs:PATH[:ro|rw]` with a relative PATH made absolute (from the working folder)."""
    if not capability.startswith("fs:") or capability.startswith("fs:/") or \
            capability in ("fs:", "fs::ro", "fs::rw"):
        return capability
    path, mode = capability[3:], ""
    if path.endswith((":ro", ":rw")):
        path, mode = path[:-3], path[-3:]
    return f"fs:{os.path.abspath(path)}{mode}"


def _jsonable(value: Any) -> Any:
    """JSON has no bytes: they print as {"$bin": hex}, as in abi/vectors."""
    if isinstance(value, bytes):
        return {"$bin": value.hex()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _line(text: Any, limit: int = CAP) -> str:
    """Plugin-controlled text as one inert, bounded line."""
    return clean(text, limit)


def _dumps(value: Any, indent: int | None = None, cap: bool = True) -> str:
    """JSON for a terminal: strings cleaned and capped (unless `cap` is False, for a
    hook's own answer), and no raw control, format or bidi character anywhere."""
    doc = clean_tree(_jsonable(value)) if cap else _jsonable(value)
    return json_safe(json.dumps(doc, indent=indent, ensure_ascii=False))


def _echo_json(value: Any, indent: int | None = 2) -> None:
    click.echo(_dumps(value, indent))


def echo_plugin_logs(logs: Iterable[Any], named: bool = False) -> None:
    """Print plugin logs (`PluginLog`s) on stderr: every kept line, `[level] text`
    (`[level] ID: text` when `named`), all the logs' lines in the order written; then
    what each log dropped, over a call's line cap or out of its last `max_log_lines`."""
    logs = list(logs)
    entries = heapq.merge(*([(line, log.plugin_id) for line in log.lines] for log in logs),
                          key=lambda entry: entry[0].time)
    for line, plugin_id in entries:
        who = f"{_line(plugin_id, 64)}: " if named else ""
        click.echo(f"[{line.level}] {who}{_line(line.text, 4096)}", err=True)
    for log in logs:
        who = f"{_line(log.plugin_id, 64)}: " if named else ""
        if log.capped:
            click.echo(f"[warn] {who}{log.capped} log lines dropped over the per-call cap "
                       "(max_log_lines)", err=True)
        if log.dropped:
            click.echo(f"[warn] {who}{log.dropped} earlier log lines not kept (the log "
                       "holds the last max_log_lines)", err=True)


def _fail(err: WasmextError, code: int = EXIT_FAULT) -> NoReturn:
    from wasmext_cli.group import error_line

    click.echo(error_line(err), err=True)  # one clean line, "wasmext: " once
    sys.exit(code)


def looked_in(cfg: Any, dirs: list[tuple[str, Path]] | None = None,
              plugins_option: bool = False) -> str:
    """Where a plugin was looked for, for a "not installed" line: the folders (`dirs`, by
    default the config's), or why there were none and how to name one."""
    folders = [str(folder) for source, folder in (cfg.plugin_dirs() if dirs is None else dirs)
               if source != "package"]
    if folders:
        return f" in {', '.join(folders)}"
    option = ", or --plugins DIR, the folder holding plugin folders" if plugins_option else ""
    if cfg.path is None:
        return (" (no ./wasmext.toml here, so no plugin folder to look in: give --config "
                f"FILE, whose [plugins] workspace_dir holds the plugin{option})")
    return f" ({cfg.path} names no plugin folder: [plugins] workspace_dir{option})"


def must_exist(path: Path, what: str) -> None:
    """Exit as every command does for a plugin that is not there (EXIT_NOT_FOUND, one
    line) when nothing is at `path`: click's own check of the path would be a usage
    error (2). `what` names it: "plugin folder", "bundle file", ..."""
    if not path.exists():
        not_found(f"no {what} at {path}: no such file or folder")


def stale_note(folder: Path, manifest: Any = None) -> str | None:
    """What to say when FOLDER, a plugin folder, holds a module built from other sources
    than the folder holds now (a command then runs the old module: an edit without
    `wasmext build` is otherwise invisible); None when it does not, or cannot be told.
    `manifest`: the folder's, already read."""
    from wasmext.buildstamp import sources_changed
    from wasmext.manifest import load_folder

    try:
        manifest = manifest if manifest is not None else load_folder(folder)
    except WasmextError:
        return None  # loading it says what is wrong
    wasm = manifest.wasm_path
    if manifest.build is None or not wasm.is_file() or not sources_changed(wasm.resolve()):
        return None
    return _line(f"plugin {manifest.id}: {wasm.name} is older than its sources (the folder's "
                 f"or its SDK's); this is the module built before (run: wasmext build {folder})")


def note_if_stale(plugin: Path) -> None:
    """Say `stale_note` on stderr when PLUGIN is a plugin folder it applies to."""
    note = stale_note(plugin) if plugin.is_dir() else None
    if note is not None:
        click.echo(f"wasmext: {note}", err=True)


def not_found(text: str) -> NoReturn:
    """Say in one clean line that the plugin (or key) a command was named is not there,
    and exit EXIT_NOT_FOUND, as every command does for it."""
    click.echo(f"wasmext: {_line(text)}", err=True)
    sys.exit(EXIT_NOT_FOUND)


# The library's warnings an operator must see to act on (logged, so an embedding
# application routes them itself): a setting's environment variable the operator did not
# allow, and a plugin denied an op for want of a grant.
# The agents' logger: an agent the operator configured that raised is theirs to fix;
# the approvals': a grant withheld (the plugin changed, a server grant without its
# manifest pin). Without them on stderr only --json-logs said so.
NOTICE_LOGGERS = ("wasmext.env", "wasmext.sandbox.hostcalls", "wasmext.services.agents",
                  "wasmext.approvals")
GrantHint = Callable[[str, str], str]


def grant_command(plugin_id: str, capability: str) -> str:
    """How an operator allows a denied op for good: the `wasmext grant` command."""
    return f"to allow it: wasmext grant {plugin_id} {capability}"


class _Notices(logging.Handler):
    """Each notice as one `wasmext: ` line on whatever sys.stderr is at the time (a test
    runner swaps it), a denial followed by how to grant what was missing."""

    hint: GrantHint | None = None
    on = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.on:
            return
        if record.name == NOTICE_LOGGERS[1] and not hasattr(record, "op"):
            return  # the op table's other records (a handler's own failure) are not notices
        text = record.getMessage()
        plugin_id, capability = getattr(record, "plugin_id", None), \
            getattr(record, "capability", None)
        if self.hint is not None and isinstance(plugin_id, str) and \
                isinstance(capability, str):
            text = f"{text}; {self.hint(plugin_id, capability)}"
            if getattr(record, "worker", None) is not None:  # its grants are the worker's
                text += " on the worker's host"
        sys.stderr.write(f"wasmext: {_line(text)}\n")


_NOTICES = _Notices(logging.WARNING)


def show_notices(hint: GrantHint | None = grant_command, on: bool = True) -> None:
    """Print the library's operator notices on stderr for this command (not when `on` is
    false: `--json-logs` carries them); `hint` says how to grant a denied capability in
    the command's terms (`wasmext grant`, `--grant`)."""
    _NOTICES.hint, _NOTICES.on = hint, on
    ctx = click.get_current_context(silent=True)
    if ctx is not None:  # for this command only (in-process callers run several)
        ctx.call_on_close(lambda: setattr(_NOTICES, "on", False))
    for name in NOTICE_LOGGERS:
        logger = logging.getLogger(name)
        if _NOTICES not in logger.handlers:
            logger.addHandler(_NOTICES)


def unmet_config(host: Any) -> list[str]:
    """What the host's config names and the host did not find: a plugin folder that does
    not exist, a plugin id that no folder holds (a typo there is otherwise silent)."""
    from wasmext.discovery import PACKAGES

    notes = [f"plugin folder {_line(folder)} does not exist"
             for source, folder in host.plugin_dirs
             if (source, folder) != PACKAGES and not folder.exists()]
    config = host.config
    if not config.extensions_enabled:  # no plugin is loaded at all: nothing to miss
        return notes
    found = set(host.plugins) | set(host.disabled) | set(config.remote) | {
        err.plugin_id for err in host.load_errors if err.plugin_id}
    notes += [f"[plugin.{pid}] names no plugin found in the plugin folders"
              for pid in sorted(set(config.overrides) - found)]
    notes += [f"[plugins] enabled names {pid}, no plugin found in the plugin folders"
              for pid in sorted(config.enabled - found)]
    notes += [f"[grants.{pid}] names no plugin found in the plugin folders"
              for pid in sorted(set(config.grants) - found)]
    return notes


def host_warnings(host: Any) -> list[str]:
    """What a command shows as `warning:` lines of its host: what the config names and the
    host did not find (`unmet_config`), and each plugin folder whose module is older than
    its sources (`stale_note`)."""
    notes = unmet_config(host)
    for loaded in host.plugins.values():
        manifest = getattr(loaded, "manifest", None)
        if manifest is not None and manifest.path is not None and manifest.build is not None:
            note = stale_note(manifest.path.parent, manifest)
            if note is not None:
                notes.append(note)
    return notes


def load_error_lines(host: Any) -> list[str]:
    """The host's load errors as the lines commands print: `not loaded: ...` for a plugin
    the host does not have, `error: ...` for one it loaded that still has a problem (an
    MCP server of its own it may not run, a reload that failed and kept the old one)."""
    lines = []
    for err in host.load_errors:
        text = _line(err.describe().removeprefix("wasmext: "))
        loaded = err.plugin_id is not None and err.plugin_id in host.plugins
        lines.append(f"{'error' if loaded else 'not loaded'}: {text}")
    return lines


def _host(config: Path | None, plugin_dirs: tuple[Path, ...],
          credential_env: tuple[str, ...] = (), instance_id: str | None = None) -> Any:
    """The host of a command; `credential_env`: variables the command itself reads as
    credentials (`mcp serve --token-env`), which no plugin may read either;
    `instance_id`: this process's name in its spans (`service.instance.id`)."""
    import dataclasses

    from wasmext import Host, HostConfig, load_config

    cfg = load_config(config) if config else HostConfig()
    if credential_env:
        cfg = dataclasses.replace(cfg, credential_env=cfg.credential_env | set(credential_env))
    if instance_id is not None:
        cfg = dataclasses.replace(cfg, tracing=dataclasses.replace(cfg.tracing,
                                                                   instance_id=instance_id))
    dirs = [("workspace", d) for d in plugin_dirs] if plugin_dirs else None
    return Host(cfg, plugin_dirs=dirs)


def started(host: Any) -> None:
    """Start-up is over (plugins loaded, servers attached): with `[host] gc_freeze` (the
    default) leave what is alive now out of later garbage collections, and again after
    each plugin load (`wasmext.tune_gc`)."""
    if host.config.gc_freeze:
        from wasmext import tune_gc

        tune_gc(host)


def _attach_remote(host: Any, url: str | None = None) -> None:
    """Proxies for the config's [remote.ID] plugins, served by workers over NATS (url,
    else [nats] url or WASMEXT_NATS_URL); each not added is a named load error."""
    if not host.config.remote:
        return
    auth = host.config.nats.with_env()
    url = url or auth.url
    if not url:
        raise click.UsageError("the config's [remote.*] plugins need a NATS server: "
                               "--nats URL, [nats] url or WASMEXT_NATS_URL")
    from wasmext_cli.nats_cmd import _import_nats_extra, needs_nats_extra

    command = " ".join(click.get_current_context().command_path.split()[1:])
    with needs_nats_extra(command):  # not "cannot connect: No module named 'nats'"
        _import_nats_extra()
        from wasmext.cluster.link import NatsLink
        from wasmext.cluster.plugins import attach_remote

    link = NatsLink(url, name="wasmext-remote", auth=auth)
    click.get_current_context().call_on_close(link.close)
    attach_remote(host, link, trusted_workers=auth.trusted_workers)


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
