"""Printing what `wasmext run` did: a readable trace, or one JSON document.

Plugins wrote much of it (trace details, answers, tool results): every line goes
through `_line` (or `clean_lines` for an answer, which may have paragraphs) and
the JSON document through `clean_tree` and `json_safe`, so nothing a plugin
wrote can drive the terminal or forge a line. A turn's text fields are capped at
`TEXT_CAP`, everything else at `wasmext.text.CAP`.
"""

from __future__ import annotations

import json
from typing import Any

import click

from wasmext import Host, Session
from wasmext.agent import TurnReport
from wasmext.errors import WasmextError
from wasmext.text import clean_lines, clean_tree, json_safe
from wasmext_cli.common import _line, host_warnings, load_error_lines

TEXT_CAP = 16384


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: v.hex() if isinstance(v, bytes)
                                 else str(v)))


def _earlier(host: Host, session: Session) -> list[dict[str, Any]]:
    """The extension results saved by earlier runs of this session (a resumed one)."""
    began = session.trace.events[0].time if session.trace.events else None
    try:
        saved = host.extensions.history(session.id)
    except WasmextError:
        return []
    return [t for t in saved if began is not None and t.get("saved_at", 0.0) < began]


def print_run(host: Host, session: Session, reports: list[TurnReport], as_json: bool) -> None:
    """Print a run's plugins, turns and trace, as text or JSON."""
    events = [e.as_dict() for e in session.trace.events]
    earlier = _earlier(host, session)
    if as_json:
        doc = {"session": session.id, "plugins": sorted(host.plugins),
               "load_errors": [e.describe() for e in host.load_errors],
               "warnings": host_warnings(host),
               "earlier_extensions": earlier,
               "turns": [r.as_dict() for r in reports], "trace": events,
               "hooks_fired": sorted({e["hook"] for e in events if e["plugin"]})}
        doc = clean_tree(_jsonable(doc), TEXT_CAP)
        click.echo(json_safe(json.dumps(doc, indent=2, ensure_ascii=False)))
        return
    names = ", ".join(sorted(host.plugins)) or "none"
    click.echo(_line(f"session {session.id}  plugins: {names}"))
    for line in load_error_lines(host):
        click.echo(f"  {line}")
    for note in host_warnings(host):
        click.echo(f"  warning: {note}")
    for turn in earlier:  # a resumed session shows its earlier turns' extension results
        click.echo(_line(f"  earlier {turn.get('turn_id')}: {turn.get('query')}", TEXT_CAP))
        for ext in turn.get("results", []):
            status = "ok" if ext.get("success") else f"failed: {ext.get('error')}"
            click.echo(_line(f"    #{ext.get('name')} [{status}] {_json(ext.get('content'))}",
                             TEXT_CAP))
    for event in events:
        who = event["plugin"] or "host"
        detail = f"  ({event['detail']})" if event["detail"] else ""
        click.echo(_line(f"  {event['hook']:<22} {who:<16} {event['outcome']}{detail}"))
    for i, r in enumerate(reports):
        click.echo(f"\nturn {i}: {_line(r.user, TEXT_CAP)}")
        for call in r.tool_calls:
            click.echo(_line(f"  tool {call['tool']}({_json(call['args'])}) -> "
                             f"{_json(call['result'])}", TEXT_CAP))
        if r.aborted:
            click.echo(_line(f"  aborted: {r.aborted}"))
        click.echo(f"  answer: {clean_lines(r.response, TEXT_CAP)}")
        for ext in r.extensions:
            status = "ok" if ext["success"] else f"failed: {ext['error']}"
            click.echo(_line(f"  #{ext['name']}{':' + ext['param'] if ext['param'] else ''} "
                             f"[{status}] {_json(ext['content'])}", TEXT_CAP))
    fired = sorted({e["hook"] for e in events if e["plugin"]})
    click.echo(f"\nhooks fired: {_line(', '.join(fired), TEXT_CAP)}")


def _json(value: Any) -> str:
    return json.dumps(_jsonable(value), ensure_ascii=False)
