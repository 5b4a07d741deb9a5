"""What a worker serves: each plugin's endpoints, and what each endpoint did.

Every loaded plugin with a `pre`, `validator`, `post` or `provider` hook has one
endpoint per stage on `<prefix>.ext.<pre|validate|post>.<id>.v<major>` or
`<prefix>.provider.<id>.v<major>`; every loaded plugin, whatever its hooks, is also
served whole on `<prefix>.plugin.<id>.v<major>.describe|call` (`cluster.served`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from wasmext.cluster.registry import EXT_TYPES, plugin_subject, subject_for

if TYPE_CHECKING:
    from wasmext.host import Host
    from wasmext.services.hostview import LoadedPlugin

__all__ = ["PLUGIN_KINDS", "Counts", "Stage", "stages_of", "version_of"]

PLUGIN_KINDS = ("describe", "call")  # the endpoints of a plugin served whole
_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


class Stage:
    """One served endpoint: a plugin's stage on its subject."""

    __slots__ = ("kind", "peer", "plugin_id", "subject")

    def __init__(self, plugin_id: str, kind: str, subject: str) -> None:
        self.plugin_id, self.kind, self.subject = plugin_id, kind, subject
        self.peer = f"request for {plugin_id}"  # what a bad request's error names


class Counts:
    """What one endpoint did: answered, failed (answered with an error), expired
    (dropped unrun), duplicate (ran, its state commit not applied again), time spent;
    calls run on the worker's loop, and demoted (calls that held the loop longer than a
    short call, each sending its plugin's calls back to the lane for a back-off)."""

    __slots__ = ("answered", "demoted", "duplicate", "expired", "failed", "on_loop",
                 "total_ns")

    def __init__(self) -> None:
        self.answered = self.failed = self.expired = self.duplicate = self.total_ns = 0
        self.on_loop = self.demoted = 0


def version_of(lp: LoadedPlugin) -> str:
    """The plugin's semver (major.minor.patch of its manifest's version, else 1.0.0)."""
    raw = lp.manifest.version if lp.manifest else ""
    match = _SEMVER.match(raw or "")
    return match.group(0) if match else "1.0.0"


def stages_of(host: Host, prefix: str) -> dict[str, list[Stage]]:
    """The stages each plugin serves, by plugin id (plugins without any left out)."""
    out: dict[str, list[Stage]] = {}
    for lp in list(host.plugins.values()):  # a rescan may change them meanwhile
        major = int(version_of(lp).split(".")[0])
        kinds = {h.hook for h in lp.plugin.registration.hooks if h.hook in EXT_TYPES}
        stages = [Stage(lp.id, k, subject_for(prefix, k, lp.id, major))
                  for k in EXT_TYPES if k in kinds]
        base = plugin_subject(prefix, lp.id, major)
        stages += [Stage(lp.id, k, f"{base}.{k}") for k in PLUGIN_KINDS]
        out[lp.id] = stages
    return out
