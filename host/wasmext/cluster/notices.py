"""Denial notices from workers: the host ops a worker refused a plugin during one call,
told to the caller, who notes them as its host notes its own (`HostServices.note_denial`:
once per session, plugin and op, naming the worker), so `wasmext run` shows them.

A caller asks for them with `Wasmext-Notices: 1`; a whole plugin's answer carries them in
`PluginAnswer.denials`, a stage's (whose body is a contract other services speak too) in
the `Wasmext-Denials` header, JSON. A worker sends them only when asked: an older caller
never gets what it would refuse, and an older worker sends none. Both ways bounded: the
worker sends the first denial of each op of the call, at most `DENIALS_PER_CALL`, each text
one inert line with the plugin's secret settings redacted; the caller reads at most that
many again, drops an op that is no op name, cleans and cuts each text again, keeps a grant
only when it is the one its own op table names for that op (the CLI prints it in a
command), and names the plugin as it knows it, whatever the text says.

A worker (or a rogue peer answering in its place) is held to what a local plugin can make
the host say. Its denials of ops the caller's table has not are noted as one op,
`UNKNOWN_OPS` (the op's name leads the text): a local plugin is denied only the table's
ops, so it gets one line per op and session, while fresh op names in every answer were
four more lines per call, without end. Its text is the worker's reason, quoted, with any
`wasmext ...` command in it removed, and its name holds only the characters of a worker
name: the one command a notice shows is the grant the caller's own table names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from wasmext.sandbox.hostcalls import DENIALS_PER_CALL, DenialSeen, HostServices
from wasmext.text import clean

__all__ = ["MAX_HEADER_CHARS", "UNKNOWN_OPS", "Denial", "Note", "from_header", "header_value",
           "note"]

# (op, message, capability) as a worker tells it
Denial = tuple[str, str, "str | None"]
# What a pipeline run notes a remote stage's denials with: (extension id, worker, denials)
Note = Callable[[str, str, Iterable[Denial]], None]
MAX_HEADER_CHARS = 8192  # a `Wasmext-Denials` header longer than this is not read
# An op's name as the op table spells them (`state.get`, `x.name`): anything else a
# worker sends as one is not noted.
_OP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# What the caller notes a worker's denial of an op its own table has not as (once per
# session and plugin, whatever the op's name).
UNKNOWN_OPS = "ops unknown to this host"
# A command in a worker's text (`wasmext grant other fs:/`): the notice's one command is
# the caller's own hint, after the text.
_COMMAND = re.compile(r"(?i)\bwasmext\b(\s+\S+)*")
# A worker's name as it may be shown (host names, ids): anything else is `?`.
_NOT_WORKER_NAME = re.compile(r"[^A-Za-z0-9_.:@/-]")


def header_value(seen: Sequence[DenialSeen]) -> str:
    """The `Wasmext-Denials` header of a stage answer: one ASCII line of JSON."""
    return json.dumps([{"op": d.op, "message": d.message, "capability": d.capability}
                       for d in seen[:DENIALS_PER_CALL]], ensure_ascii=True,
                      separators=(",", ":"))


def from_header(value: str) -> list[Denial]:
    """The denials a `Wasmext-Denials` header names (at most `DENIALS_PER_CALL`; nothing
    when it is too long or not the shape)."""
    if len(value) > MAX_HEADER_CHARS:
        return []
    try:
        doc: Any = json.loads(value)
    except (ValueError, RecursionError):
        return []
    if not isinstance(doc, list):
        return []
    out: list[Denial] = []
    for item in doc[:DENIALS_PER_CALL]:
        if not isinstance(item, dict):
            continue
        op, message, capability = item.get("op"), item.get("message", ""), \
            item.get("capability")
        if isinstance(op, str) and isinstance(message, str) and \
                (capability is None or isinstance(capability, str)):
            out.append((op, message, capability))
    return out


def note(services: HostServices, plugin_id: str, session: str | None, worker: str,
         denials: Iterable[Denial]) -> None:
    """Note a worker's denials of one call of `plugin_id` (the caller's name for it) as the
    host notes its own: bounded, cleaned, the grant only when `services` names it."""
    shown_worker = _NOT_WORKER_NAME.sub("?", clean(worker, 64))
    for n, (op, message, capability) in enumerate(denials):
        if n >= DENIALS_PER_CALL:
            break
        if len(op) > 64 or not _OP_NAME.fullmatch(op):  # its characters inert, then
            continue
        reason = json.dumps(_COMMAND.sub("[a command removed]", clean(message, 300)),
                            ensure_ascii=False)
        needed = services.capability_of(op)
        if needed is None:
            services.note_denial(plugin_id, session, UNKNOWN_OPS,
                                 f"{op}: the worker says {reason}", None, shown_worker)
            continue
        services.note_denial(plugin_id, session, op, f"the worker says {reason}",
                             needed if needed and capability == needed else None,
                             shown_worker)
