"""`wasmext run` and `wasmext stats`: one agent session through the plugins."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from wasmext.errors import NatsUnavailable, WasmextError
from wasmext_cli.common import (
    CONFIG_OPT,
    EXIT_FAULT,
    EXIT_USAGE,
    PLUGINS_OPT,
    _default_config,
    _echo_json,
    _fail,
    _host,
    _line,
    echo_plugin_logs,
    show_notices,
    started,
)

F = TypeVar("F", bound=Callable[..., Any])


def session_options(fn: F) -> F:
    """Add the session options (transcript, config, plugins, policy, model) to a command."""
    for option in reversed([
        click.argument("transcript", required=False,
                       type=click.Path(exists=True, dir_okay=False, path_type=Path)),
        CONFIG_OPT, PLUGINS_OPT,
        click.option("--policy", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="A routing policy (JSON or TOML) for pre/validator/post stages; "
                          "read again when it (or the config's [extensions]) changes."),
        click.option("--nats", "nats_url", metavar="URL",
                     help="The NATS server of the remote stages ([extensions.ID]) and plugins "
                          "([remote.ID]); "
                          "default: [nats] url."),
        click.option("--tenant", "tenant_id", default="default", show_default=True,
                     help="The tenant the policy runs for (its overrides apply)."),
        click.option("--model-url", help="An OpenAI-compatible endpoint (base URL, .../v1)."),
        click.option("--model", "model_name", default="gpt-4o-mini", show_default=True,
                     help="Model name for --model-url."),
        click.option("--prompt", "prompts", multiple=True, help="A user turn (--model-url)."),
        click.option("--user", help="The user whose activations name the #extensions."),
        click.option("--session", "session_id", help="Resume this session id (its saved "
                     "extension results: `wasmext extensions history`)."),
        click.option("--max-steps", type=click.IntRange(1, 50), default=4, show_default=True),
        click.option("--no-builtin-tools", "no_builtin_tools", is_flag=True,
                     help="Offer the agent no demo tools (calc, clock, ...): only the "
                          "plugins' and the MCP servers' tools."),
        click.option("--json", "as_json", is_flag=True, help="Print a JSON document."),
        click.option("--example", is_flag=True,
                     help="Play the example session's transcript and policy (with this "
                          "config and plugins: remote ones, say)."),
        click.option("--metrics-port", type=click.IntRange(0, 65535),
                     help="Serve Prometheus /metrics on 127.0.0.1:PORT while running."),
        click.option("--json-logs", is_flag=True, help="Log JSON lines to stderr."),
    ]):
        fn = option(fn)
    return fn


def _use_example(opts: dict[str, Any]) -> None:
    """No transcript, config or plugins: the example session the wheel ships, with its
    state in a temporary folder removed when the command ends."""
    import tempfile

    from wasmext import Host
    from wasmext_cli.example import example_config, example_root

    root = example_root()
    data = tempfile.TemporaryDirectory(prefix="wasmext-example-")
    click.get_current_context().call_on_close(data.cleanup)
    cfg = example_config(data.name)
    opts["transcript"] = root / "transcript.json"
    opts["policy"] = opts["policy"] or root / "policy.toml"
    opts["example_host"] = Host(cfg)
    click.echo(f"(no wasmext.toml here: playing the example session shipped with wasmext, "
               f"{root})", err=True)


def _routing(opts: dict[str, Any], host: Any) -> Any:
    """The policy as a LiveRouting: its stages in-process or, for ids the config's
    [extensions] registers, over NATS (--nats, else [nats] url or WASMEXT_NATS_URL, with
    [nats]'s credentials); both files read again when they change."""
    from wasmext import load_config
    from wasmext.cluster.live import LiveRouting

    auth = host.config.nats.with_env()
    link = _nats_link(opts, host)
    config = _default_config(opts["config"])
    return LiveRouting(opts["policy"], config, lambda p: load_config(p).extensions, link,
                       trusted_workers=auth.trusted_workers)


def _start_exit(err: WasmextError) -> int:
    """The exit code of an error met before the first turn: a NATS server that cannot be
    reached exits 1, as `worker` and `nats ls` do, since the command was right and may
    work once the server is up; anything else is the command's or the config's (2)."""
    return EXIT_FAULT if isinstance(err, NatsUnavailable) else EXIT_USAGE


def _nats_link(opts: dict[str, Any], host: Any) -> Any:
    """The run's one NATS link (--nats, else [nats] url or WASMEXT_NATS_URL, with [nats]'s
    credentials), opened on first use and closed with the command; None without a URL."""
    if "nats_link" in opts:
        return opts["nats_link"]
    auth = host.config.nats.with_env()
    url = opts["nats_url"] or auth.url
    link = None
    if url:
        from wasmext_cli.nats_cmd import _import_nats_extra, needs_nats_extra

        with needs_nats_extra("run"):  # not "cannot connect: No module named 'nats'"
            _import_nats_extra()
            from wasmext.cluster.link import NatsLink

        link = NatsLink(url, name="wasmext-run", auth=auth)
        click.get_current_context().call_on_close(link.close)
    opts["nats_link"] = link
    return link


def _attach_remote(opts: dict[str, Any], host: Any) -> None:
    """Proxies for the config's [remote.ID] plugins (served by workers): each one a
    worker does not advertise acceptably is a load error, named like a local one."""
    if not host.config.remote:
        return
    link = _nats_link(opts, host)
    if link is None:
        raise click.UsageError("the config's [remote.*] plugins need a NATS server: "
                               "--nats URL or [nats] url")
    from wasmext.cluster.plugins import attach_remote

    # Each one not added is a load error, shown with the others (trace.print_run).
    attach_remote(host, link, trusted_workers=host.config.nats.with_env().trusted_workers)


def _say_unmet_stages(policy: Path, routing: Any, host: Any) -> None:
    """One line for each stage the policy (or a tenant's) names that is no loaded plugin
    and no remote extension: every turn that reaches it fails there, and until now only
    the turns said so."""
    from wasmext_cli.example import example_root

    # The shipped policy's path is deep in site-packages: its name says more.
    shown = "the example policy" if policy == example_root() / "policy.toml" else policy
    used = routing.current().routing.stage_ids()
    for stage in sorted(used - set(host.plugins) - set(host.config.extensions)):
        if stage in host.config.remote:  # configured: what is missing is its worker
            why = (f"the config's [remote.{stage}] plugin, which did not load (its "
                   "`not loaded:` line says why)")
        else:
            why = f"which is no loaded plugin and no [extensions.{stage}] of the config"
        click.echo(_line(f"wasmext: warning: {shown} names stage {stage}, {why}"), err=True)


def _say_unavailable_servers(host: Any) -> None:
    """One line for each configured MCP server that did not connect: the agent runs
    without its tools, and nothing else in the run's output says so."""
    if host.mcp is None:
        return
    for server in host.config.mcp_servers:
        status = host.mcp.status(server.name)
        if status.startswith("unavailable"):
            click.echo(_line(f"wasmext: mcp server {server.name} is {status}; the agent runs "
                             "without its tools (`wasmext mcp ls` shows every server)"),
                       err=True)


def _drive(opts: dict[str, Any]) -> tuple[Any, Any, list[Any]]:
    from wasmext.agent import Agent
    from wasmext.models import OpenAIModel, ReplayModel, load_transcript
    from wasmext_cli.ui import show_compiles

    if opts.get("example"):
        from wasmext_cli.example import example_root

        opts["transcript"] = opts["transcript"] or example_root() / "transcript.json"
        opts["policy"] = opts["policy"] or example_root() / "policy.toml"
    show_compiles()
    show_notices(on=not opts["json_logs"])  # JSON log lines carry the same records
    secrets = None
    if opts["json_logs"]:  # before the host loads: its load-time notices are lines too
        import logging  # here, so that `--help` starts fast

        from wasmext.observe.logs import SecretRegistry, json_handler

        secrets = SecretRegistry()
        handler = json_handler(sys.stderr, secrets)
        logger = logging.getLogger("wasmext")
        logger.addHandler(handler)
        ctx = click.get_current_context()
        ctx.call_on_close(lambda: logger.removeHandler(handler))  # this command's only
        if opts.get("show_log"):  # every plugin line (trace is 5), as it is written
            plugin_lines = logging.getLogger("wasmext.sandbox.plugin")
            level = plugin_lines.level
            plugin_lines.setLevel(5)
            ctx.call_on_close(lambda: plugin_lines.setLevel(level))
    try:
        if not opts["model_url"] and opts["transcript"] is None and not opts["plugin_dirs"] \
                and _default_config(opts["config"]) is None:
            _use_example(opts)
        if opts["model_url"]:
            if not opts["prompts"]:
                raise click.UsageError("--model-url needs at least one --prompt")
            model: Any = OpenAIModel(opts["model_url"], opts["model_name"])
            turns, system = list(opts["prompts"]), "You are a helpful assistant."
        elif opts["transcript"] is not None:
            script = load_transcript(opts["transcript"])
            model, system = ReplayModel(script), script.system
            turns = [t["user"] for t in script.turns]
        else:
            # Plugins but no transcript (a first plugin, --plugins ..): the smallest one.
            # (--example's policy needs the example plugins, so it is not offered here.)
            raise click.UsageError(
                "give a TRANSCRIPT to replay (a JSON file, at its smallest "
                '{"turns": [{"user": "hi", "steps": [{"response": "hello"}]}]}), or '
                "--model-url and --prompt")
        host = opts.get("example_host") or _host(_default_config(opts["config"]),
                                                 opts["plugin_dirs"])
        if host.llm.completer is None:  # llm.complete asks the session's model
            host.llm.use(model.chat, model.name)
        _attach_remote(opts, host)
        routing = _routing(opts, host) if opts["policy"] else None
        if routing is not None:
            _say_unmet_stages(opts["policy"], routing, host)
    except WasmextError as err:
        _fail(err, _start_exit(err))
    if secrets is not None:  # the loaded plugins' sensitive values, redacted from now on
        for lp in host.plugins.values():
            for name, value in lp.plugin.settings.items():
                if name in lp.plugin.sensitive and value:
                    secrets.add(str(value))
    server = host.observe.metrics.serve(opts["metrics_port"]) \
        if opts["metrics_port"] is not None else None
    if server is not None:
        click.echo(f"metrics: {server.url}", err=True)
    try:
        # The configured MCP servers' tools (`<server>__<tool>`) join the registry
        # before the agent reads it, beside the built-in and the plugins' tools.
        host.start_mcp()
        if not opts["json_logs"]:  # (JSON log lines say it there)
            _say_unavailable_servers(host)
        agent = Agent(host, model, system=system, max_steps=opts["max_steps"],
                      tools={} if opts["no_builtin_tools"] else None,
                      routing=routing.current if routing is not None else None,
                      tenant_id=opts["tenant_id"])
    except WasmextError as err:
        if server is not None:
            server.close()
        host.close()
        _fail(err, _start_exit(err))
    started(host)
    try:
        with host.session(opts.get("session_id"), user_id=opts.get("user")) as session:
            reports = [agent.run_turn(session, i, text) for i, text in enumerate(turns)]
    finally:
        if server is not None:
            server.close()
    return host, session, reports


@click.command()
@session_options
@click.option("--log/--no-log", "show_log", default=False,
              help="Show the plugins' log lines: on stderr after the session, "
                   "`[level] ID: text` (as `call --log`); with --json-logs, each one "
                   "as a JSON line as it is written.")
def run(**opts: Any) -> None:
    """Drive an agent session through the plugins and show what each one did.

    The embedded default model replays TRANSCRIPT; --model-url talks to a real
    OpenAI-compatible endpoint instead, with the turns given by --prompt.
    """
    from wasmext_cli.trace import print_run

    host, session, reports = _drive(opts)
    with host:
        print_run(host, session, reports, opts["as_json"])
        if opts["show_log"] and not opts["json_logs"]:  # (JSON log lines carried them)
            echo_plugin_logs([lp.plugin.log for lp in host.plugins.values()], named=True)
        if host.tracing is not None:  # where to look the session up ([tracing])
            click.echo(f"trace: {session.context['trace_id']}", err=True)


@click.command()
@session_options
def stats(**opts: Any) -> None:
    """Run a session like `run` and print per-plugin calls, latency, fuel, faults, state."""
    host, _, _ = _drive(opts)
    with host:
        table = host.observe.metrics.snapshot()
    if opts["as_json"]:
        _echo_json(table)
        return
    click.echo(f"{'plugin':<18}{'calls':>7}{'p50 ms':>9}{'p99 ms':>9}{'fuel':>12}"
               f"{'faults':>8}{'state B':>9}{'tokens':>8}{'cost':>10}")
    for pid, s in sorted(table.items()):
        def ms(v: float | None) -> str:
            return f"{v:.3f}" if v is not None else "-"
        click.echo(f"{_line(pid, 128):<18}{s['calls']:>7}{ms(s['p50_ms']):>9}{ms(s['p99_ms']):>9}"
                   f"{s['fuel']:>12}{s['faults']:>8}{s['state_bytes']:>9}"
                   f"{s['llm_tokens']:>8}{s['llm_cost']:>10.6f}")
