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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from wasmext.sandbox.hostcalls import DENIALS_PER_CALL, DenialSeen, HostServices
from wasmext.text import clean

__all__ = ["MAX_HEADER_CHARS", "Denial", "Note", "from_header", "header_value", "note"]

# (op, message, capability) as a worker tells it
Denial = tuple[str, str, "str | None"]
# What a pipeline run notes a remote stage's denials with: (extension id, worker, denials)
Note = Callable[[str, str, Iterable[Denial]], None]
MAX_HEADER_CHARS = 8192  # a `Wasmext-Denials` header longer than this is not read
# An op's name as the op table spells them (`state.get`, `x.name`): anything else a
# worker sends as one is not noted.
_OP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


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
    for n, (op, message, capability) in enumerate(denials):
        if n >= DENIALS_PER_CALL:
            break
        if len(op) > 64 or not _OP_NAME.fullmatch(op):  # its characters inert, then
            continue
        needed = services.capability_of(op)
        services.note_denial(plugin_id, session, op, clean(message, 300),
                             needed if needed and capability == needed else None, worker)
