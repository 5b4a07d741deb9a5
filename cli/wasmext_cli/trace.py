"""Printing what `wasmext run` did: a readable trace, or one JSON document."""

from __future__ import annotations

import json
from typing import Any

import click

from wasmext import Host, Session
from wasmext.agent import TurnReport


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda v: v.hex() if isinstance(v, bytes)
                                 else str(v)))


def print_run(host: Host, session: Session, reports: list[TurnReport], as_json: bool) -> None:
    events = [e.as_dict() for e in session.trace.events]
    if as_json:
        doc = {"session": session.id, "plugins": sorted(host.plugins),
               "load_errors": [e.describe() for e in host.load_errors],
               "turns": [r.as_dict() for r in reports], "trace": events,
               "hooks_fired": sorted({e["hook"] for e in events if e["plugin"]})}
        click.echo(json.dumps(_jsonable(doc), indent=2, ensure_ascii=False))
        return
    click.echo(f"session {session.id}  plugins: {', '.join(sorted(host.plugins)) or 'none'}")
    for err in host.load_errors:
        click.echo(f"  not loaded: {err.describe()}")
    for event in events:
        who = event["plugin"] or "host"
        detail = f"  ({event['detail']})" if event["detail"] else ""
        click.echo(f"  {event['hook']:<22} {who:<16} {event['outcome']}{detail}")
    for i, r in enumerate(reports):
        click.echo(f"\nturn {i}: {r.user}")
        for call in r.tool_calls:
            click.echo(f"  tool {call['tool']}({json.dumps(call['args'])}) -> "
                       f"{json.dumps(_jsonable(call['result']), ensure_ascii=False)}")
        if r.aborted:
            click.echo(f"  aborted: {r.aborted}")
        click.echo(f"  answer: {r.response}")
        for ext in r.extensions:
            status = "ok" if ext["success"] else f"failed: {ext['error']}"
            click.echo(f"  #{ext['name']}{':' + ext['param'] if ext['param'] else ''} "
                       f"[{status}] {json.dumps(_jsonable(ext['content']), ensure_ascii=False)}")
    fired = sorted({e["hook"] for e in events if e["plugin"]})
    click.echo(f"\nhooks fired: {', '.join(fired)}")
