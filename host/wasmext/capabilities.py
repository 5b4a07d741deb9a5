"""What a capability may be: the names grants, `--grant` and plugin.toml use.

An op family's capability (abi.toml: `state`, `http`, ...), one of them narrowed to a
pattern (`http:api.example.com`), a host folder (`fs:/srv/notes:ro`), or an embedder's
own (`HostServices.register(..., capability=...)`). A name one typo from a known one
(`stat`, `htttp`, `secret`) is refused wherever it is written: as a grant it would be
checked by nothing, and as a manifest's request it would ask for nothing.
"""

from __future__ import annotations

import difflib

from wasmext._abi import OPS
from wasmext.sandbox.fsgrants import fs_grant_problem, fs_path_problem
from wasmext.text import clean

__all__ = ["CAPABILITIES", "CUSTOM_CUTOFF", "FOLDER", "PATTERNED", "capability_problem",
           "capability_typo"]


# What a grant may say: the capability of an op family (abi.toml), or one of them
# narrowed to a pattern (docs/embedding.md, world.md, mcp.md).
CAPABILITIES = frozenset(cap for cap, _since, _impl in OPS.values() if cap)
PATTERNED = {"http": "http:<host pattern>", "tool": "tool:<tool pattern>",
             "agents": "agents:<agent pattern>", "emit": "emit:<topic pattern>",
             "subscribe": "subscribe:<topic pattern>",
             "resources": "resources:<server>__<uri pattern>",
             "prompts": "prompts:<server>__<prompt pattern>",
             "mcp-server": "mcp-server:<server of the manifest>"}
# How close a name must be to a known capability to be taken for its typo where a name
# may also be an embedder's own capability (a config's [grants]): "htttp", "stat" and
# "secret" are; "lookup" and "billing" are not.
CUSTOM_CUTOFF = 0.75
# A host folder shown to the plugin (sandbox.wasifs): a path, not a pattern.
FOLDER = "fs:<absolute folder>[:ro|rw]"


def capability_problem(capability: str, label: str | None = None,
                       custom: bool = False) -> str | None:
    """Why `capability` is not something a grant can say (a typo, say), or None.

    The message names the nearest known capability and every known form, so
    `wasmext grant kb htttp` is refused before it is recorded as a grant nothing
    would ever check. `label` names the capability in the message instead of its
    text (a config file's item, whose values a message never repeats). With `custom`,
    a plain name close to no known one passes: it may be the capability of an
    embedder's own op (`HostServices.register(..., capability=...)`)."""
    if capability in CAPABILITIES:
        return None
    kind, colon, pattern = capability.partition(":")
    known = sorted(CAPABILITIES)
    forms = [*known, *PATTERNED.values(), FOLDER]
    if kind == "fs" and colon:
        problem = fs_grant_problem(capability)
        if problem is not None and label is not None:
            path = capability[3:-3] if capability.endswith((":ro", ":rw")) else capability[3:]
            problem = f"{label} {fs_path_problem(path)}"
        return None if problem is None else \
            clean(f"{problem}; a grant is one of: {', '.join(forms)}", 600)
    name = repr(capability) if label is None else label
    if colon and kind in PATTERNED and pattern:
        return None
    if colon and kind in PATTERNED:
        return clean(f"{name} has an empty pattern; write {PATTERNED[kind]}", 600)
    if not colon and (kind in PATTERNED or kind == "fs"):  # `fs`, `tool`, `emit`: no bare form
        return clean(f"{name} grants nothing without what it names; write "
                     f"{PATTERNED.get(kind, FOLDER)}", 600)
    near = difflib.get_close_matches(kind if colon else capability,
                                     [*known, *PATTERNED, "fs"], n=1,
                                     cutoff=CUSTOM_CUTOFF if custom else 0.6)
    if custom and not near:
        return None
    said = near[0] + (":" + pattern if colon and label is None else ":..." if colon else "") \
        if near else ""
    hint = f"did you mean {said!r}? " if near else ""
    return clean(f"{name} is not a capability; {hint}a grant is one of: {', '.join(forms)}",
                 600)


def capability_typo(capability: str) -> str | None:
    """Why `capability`, asked for in a plugin.toml, is a typo of a known capability (the
    nearest named), or None. A manifest asks in general terms (`fs`, `tool`, `emit`, an
    embedder's own name), so only a near miss is refused."""
    kind, colon, _pattern = capability.partition(":")
    if capability in CAPABILITIES or kind in PATTERNED or kind == "fs":
        return None
    if not difflib.get_close_matches(kind if colon else capability,
                                     [*CAPABILITIES, *PATTERNED, "fs"], n=1,
                                     cutoff=CUSTOM_CUTOFF):
        return None  # an embedder's own capability, perhaps
    return capability_problem(capability)
