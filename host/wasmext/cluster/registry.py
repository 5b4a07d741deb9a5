"""The extension registry: where each remote extension lives and how to call it.

    [extensions.normalize_text]          # in wasmext.toml, or a .toml/.json file of
    type = "pre"                         # {id: {type, subject, timeout_ms, retry}}
    subject = "beamline.ext.pre.normalize_text.v1"
    timeout_ms = 80
    retry = 0
    encoding = "json"                    # or "msgpack" (a wasmext worker speaks both)
    breaker = { failures = 5, reset_ms = 5000 }

Unknown keys are refused, as in the routing policy. `subject_for` names the subject
a worker serves a plugin's stage on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmext._toml import ConfigTextError, parse_text, read_capped
from wasmext.errors import ConfigError

__all__ = ["EXT_TYPES", "STAGE_SEGMENT", "RemoteExtension", "check_prefix", "load_registry",
           "parse_registry", "subject_for"]

EXT_TYPES = ("pre", "validator", "post", "provider")
# The subject segment of each type (the reference names validators `ext.validate.*`).
STAGE_SEGMENT = {"pre": "ext.pre", "validator": "ext.validate", "post": "ext.post",
                 "provider": "provider"}
_TOKEN = r"[A-Za-z0-9_-]{1,64}"
SUBJECT_RE = re.compile(rf"{_TOKEN}(?:\.{_TOKEN}){{0,15}}")
EXT_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")
_KEYS = {"type", "subject", "timeout_ms", "retry", "encoding", "breaker"}


@dataclass(frozen=True)
class RemoteExtension:
    id: str
    type: str
    subject: str
    timeout_ms: int = 1000
    retry: int = 0
    encoding: str = "json"
    breaker_failures: int = 5  # consecutive failures that open the circuit
    breaker_reset_ms: int = 5000  # how long it stays open before one trial call


def check_prefix(prefix: str) -> str:
    if not SUBJECT_RE.fullmatch(prefix):
        raise ConfigError(f"subject prefix {prefix!r}: dot-separated tokens of letters, "
                          "digits, '_' and '-'")
    return prefix


def subject_for(prefix: str, ext_type: str, plugin_id: str, major: int) -> str:
    """`<prefix>.ext.<pre|validate|post>.<id>.v<major>` or `<prefix>.provider.<id>.v<major>`."""
    return f"{check_prefix(prefix)}.{STAGE_SEGMENT[ext_type]}.{plugin_id}.v{major}"


def _int(entry: Mapping[str, Any], key: str, default: int, low: int, high: int,
         where: str) -> int:
    value = entry.get(key, default)
    if type(value) is not int or not low <= value <= high:
        raise ConfigError(f"{where}.{key}: must be an int {low}-{high}")
    return value


def _one(ext_id: str, entry: Any, where: str) -> RemoteExtension:
    if not EXT_ID_RE.match(ext_id):
        raise ConfigError(f"{where}: not an extension id (lowercase letters, digits, '-', '_')")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a table")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    if entry.get("type") not in EXT_TYPES:
        raise ConfigError(f"{where}.type: must be one of {', '.join(EXT_TYPES)}")
    subject = entry.get("subject")
    if not isinstance(subject, str) or not SUBJECT_RE.fullmatch(subject):
        raise ConfigError(f"{where}.subject: must be a NATS subject without wildcards")
    encoding = entry.get("encoding", "json")
    if encoding not in ("json", "msgpack"):
        raise ConfigError(f"{where}.encoding: must be json or msgpack")
    breaker = entry.get("breaker", {})
    if not isinstance(breaker, dict) or set(breaker) - {"failures", "reset_ms"}:
        raise ConfigError(f"{where}.breaker: a table of failures and reset_ms only")
    return RemoteExtension(
        ext_id, entry["type"], subject,
        timeout_ms=_int(entry, "timeout_ms", 1000, 1, 600_000, where),
        retry=_int(entry, "retry", 0, 0, 10, where), encoding=encoding,
        breaker_failures=_int(breaker, "failures", 5, 1, 1000, f"{where}.breaker"),
        breaker_reset_ms=_int(breaker, "reset_ms", 5000, 1, 3_600_000, f"{where}.breaker"))


def parse_registry(raw: Mapping[str, Any], where: str = "extensions"
                   ) -> dict[str, RemoteExtension]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a table of extensions")
    return {ext_id: _one(ext_id, entry, f"{where}.{ext_id}") for ext_id, entry in raw.items()}


def load_registry(path: Path) -> dict[str, RemoteExtension]:
    """A registry file (.json or .toml): the extensions at top level, or under `extensions`."""
    try:
        raw = parse_text(read_capped(path), kind="json" if path.suffix == ".json" else "toml")
    except (OSError, ConfigTextError) as exc:
        raise ConfigError(f"{path}: cannot read registry: {exc}") from exc
    if set(raw) == {"extensions"}:
        raw = raw["extensions"]
    return parse_registry(raw, f"{path.name}")
