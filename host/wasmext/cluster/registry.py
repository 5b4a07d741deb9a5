"""The extension registry: where each remote extension lives and how to call it.

    [extensions.normalize_text]          # in wasmext.toml, or a .toml/.json file of
    type = "pre"                         # {id: {type, subject, timeout_ms, retry}}
    subject = "beamline.ext.pre.normalize_text.v1"
    timeout_ms = 80
    retry = 0
    encoding = "json"                    # or "msgpack" (a wasmext worker speaks both)
    breaker = { failures = 5, reset_ms = 5000 }

Unknown keys are refused, as in the routing policy; the rules are the pydantic model
`ExtensionSpec`, so a bad registry is one ConfigError naming every problem
(`wasmext.validation`). `subject_for` names the subject a worker serves a plugin's
stage on.

A whole plugin served by workers (every hook and tool of it, `cluster.plugins`) is a
`[remote.ID]` table instead, `RemotePluginSpec`:

    [remote.agent-guard]
    subject = "wasmext.plugin.agent-guard.v0"  # `plugin_subject` of the worker
    timeout_ms = 5000                # one call's deadline (the call tree's may be less)
    attempt_ms = 2000                # one worker's share: unanswered, the next one tries
    retry = 1                        # attempts after the first, while time is left
    failure = "open"                 # the local failure policy: open, closed or reload
    quarantine = { faults = 5, cooldown_ms = 1000 }
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, RootModel

from wasmext._toml import ConfigTextError, parse_text, read_capped
from wasmext.errors import ConfigError
from wasmext.validation import SECTION, check, problem

__all__ = ["EXT_TYPES", "STAGE_SEGMENT", "ExtensionId", "ExtensionSpec", "RemoteExtension",
           "RemotePluginEntry", "RemotePluginSpec", "check_prefix", "load_registry",
           "parse_registry", "plugin_subject", "subject_for"]

EXT_TYPES = ("pre", "validator", "post", "provider")
# The subject segment of each type (the reference names validators `ext.validate.*`).
STAGE_SEGMENT = {"pre": "ext.pre", "validator": "ext.validate", "post": "ext.post",
                 "provider": "provider"}
_TOKEN = r"[A-Za-z0-9_-]{1,64}"
SUBJECT_RE = re.compile(rf"{_TOKEN}(?:\.{_TOKEN}){{0,15}}")
EXT_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")


@dataclass(frozen=True)
class RemoteExtension:
    """A remote extension: its NATS subject, timeout, retries, encoding and breaker."""

    id: str
    type: str
    subject: str
    timeout_ms: int = 1000
    retry: int = 0
    encoding: str = "json"
    breaker_failures: int = 5  # consecutive failures that open the circuit
    breaker_reset_ms: int = 5000  # how long it stays open before one trial call


def check_prefix(prefix: str) -> str:
    """Return the subject prefix if it is dot-separated tokens; else ConfigError."""
    if not SUBJECT_RE.fullmatch(prefix):
        raise ConfigError(f"subject prefix {prefix!r}: dot-separated tokens of letters, "
                          "digits, '_' and '-'")
    return prefix


def subject_for(prefix: str, ext_type: str, plugin_id: str, major: int) -> str:
    """`<prefix>.ext.<pre|validate|post>.<id>.v<major>` or `<prefix>.provider.<id>.v<major>`."""
    return f"{check_prefix(prefix)}.{STAGE_SEGMENT[ext_type]}.{plugin_id}.v{major}"


def plugin_subject(prefix: str, plugin_id: str, major: int) -> str:
    """`<prefix>.plugin.<id>.v<major>`: the base of a whole plugin's endpoints (`.call`,
    `.describe`, `.cancel`)."""
    return f"{check_prefix(prefix)}.plugin.{plugin_id}.v{major}"


def _ext_id(ext_id: str) -> str:
    if not EXT_ID_RE.match(ext_id):
        problem("not an extension id (lowercase letters, digits, '-', '_')")
    return ext_id


def _subject(subject: str) -> str:
    if not SUBJECT_RE.fullmatch(subject):
        problem("must be a NATS subject without wildcards")
    return subject


ExtensionId = Annotated[str, AfterValidator(_ext_id)]


class BreakerTable(BaseModel):
    """A remote extension's circuit breaker."""

    model_config = SECTION

    failures: Annotated[int, Field(strict=True, ge=1, le=1000)] = 5
    reset_ms: Annotated[int, Field(strict=True, ge=1, le=3_600_000)] = 5000


class ExtensionSpec(BaseModel):
    """The rules of one registry entry ([extensions.ID])."""

    model_config = SECTION

    type: Literal["pre", "validator", "post", "provider"]
    subject: Annotated[str, AfterValidator(_subject)]
    timeout_ms: Annotated[int, Field(strict=True, ge=1, le=600_000)] = 1000
    retry: Annotated[int, Field(strict=True, ge=0, le=10)] = 0
    encoding: Literal["json", "msgpack"] = "json"
    breaker: BreakerTable = BreakerTable()

    def remote(self, ext_id: str) -> RemoteExtension:
        """The validated entry as the cluster takes it."""
        return RemoteExtension(ext_id, self.type, self.subject, self.timeout_ms, self.retry,
                               self.encoding, self.breaker.failures, self.breaker.reset_ms)


@dataclass(frozen=True)
class RemotePluginEntry:
    """A plugin served by workers: where, its deadlines, retries, failure policy and
    quarantine."""

    id: str
    subject: str
    timeout_ms: int = 5000
    attempt_ms: int = 2000
    retry: int = 1
    failure: str = "open"
    quarantine_faults: int = 5
    quarantine_cooldown_ms: int = 1000


class QuarantineTable(BaseModel):
    """A remote plugin's quarantine: faults in a row, then the first cooldown."""

    model_config = SECTION

    faults: Annotated[int, Field(strict=True, ge=1, le=1000)] = 5
    cooldown_ms: Annotated[int, Field(strict=True, ge=1, le=3_600_000)] = 1000


class RemotePluginSpec(BaseModel):
    """The rules of one `[remote.ID]` table."""

    model_config = SECTION

    subject: Annotated[str, AfterValidator(_subject)]
    timeout_ms: Annotated[int, Field(strict=True, ge=1, le=600_000)] = 5000
    attempt_ms: Annotated[int, Field(strict=True, ge=1, le=600_000)] | None = None
    retry: Annotated[int, Field(strict=True, ge=0, le=10)] = 1
    failure: Literal["open", "closed", "reload"] = "open"
    quarantine: QuarantineTable = QuarantineTable()

    def entry(self, plugin_id: str) -> RemotePluginEntry:
        """The validated table as the cluster takes it."""
        attempt = min(self.attempt_ms or self.timeout_ms, self.timeout_ms)
        return RemotePluginEntry(plugin_id, self.subject, self.timeout_ms, attempt,
                                 self.retry, self.failure, self.quarantine.faults,
                                 self.quarantine.cooldown_ms)


class Registry(RootModel[dict[ExtensionId, ExtensionSpec]]):
    """A whole registry: extension ids to their entries."""

    model_config = ConfigDict(strict=True, frozen=True)


def parse_registry(raw: Any, where: str = "extensions", source: str = ""
                   ) -> dict[str, RemoteExtension]:
    """The extensions of `raw`, or one ConfigError naming every problem under `where`."""
    entries = check(Registry, raw, prefix=where, source=source).root
    return {ext_id: spec.remote(ext_id) for ext_id, spec in entries.items()}


def load_registry(path: Path) -> dict[str, RemoteExtension]:
    """A registry file (.json or .toml): the extensions at top level, or under `extensions`."""
    try:
        raw = parse_text(read_capped(path), kind="json" if path.suffix == ".json" else "toml")
    except (OSError, ConfigTextError) as exc:
        raise ConfigError(f"{path}: cannot read registry: {exc}") from exc
    if set(raw) == {"extensions"}:
        raw = raw["extensions"]
    return parse_registry(raw, "", path.name)
