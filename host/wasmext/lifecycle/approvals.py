"""Recorded approvals: capabilities an operator granted a plugin, keyed to its digest.

    data_dir/approvals.json
    {"plugins": {"kb": {"digest": "sha256:...", "path": "plugins/kb",
                        "capabilities": {"state": {"by": "ann", "at": "2026-11-23T19:00:00Z"}}}}}

Each grant says who gave it and when (the approval metadata of the reference
trust model: source path, hash, timestamp, approver). A grant holds only for
the digest it was given to: when the module changes, the host withholds it
until an operator grants again. Every write is atomic (temp, fsync, rename).
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from wasmext.errors import ConfigError
from wasmext.files import atomic_write, read_regular
from wasmext.text import clean

__all__ = ["Approval", "ApprovalStore"]

log = logging.getLogger("wasmext.approvals")
MAX_FILE_BYTES = 4 * 2**20
_write_lock = threading.Lock()


@dataclass(frozen=True)
class Approval:
    plugin_id: str
    digest: str
    capability: str
    by: str
    at: str
    path: str = ""


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApprovalStore:
    """The approvals file of one data dir; read fresh on every question."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> ApprovalStore:
        return cls(Path(data_dir) / "approvals.json")

    def _read(self) -> dict[str, Any]:
        try:
            raw = read_regular(self.path, MAX_FILE_BYTES)
        except FileNotFoundError:
            return {}
        except OSError as exc:  # UnsafeFile too: a FIFO or device is refused, not waited on
            raise ConfigError(f"{self.path}: cannot read: {exc.strerror}") from exc
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{self.path}: not JSON: {exc}") from exc
        plugins = doc.get("plugins") if isinstance(doc, dict) else None
        return plugins if isinstance(plugins, dict) else {}

    def _write(self, plugins: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps({"plugins": plugins}, indent=1, sort_keys=True),
                     mode=0o600)

    def all(self) -> list[Approval]:
        out = []
        for pid, entry in sorted(self._read().items()):
            if not isinstance(entry, dict) or not isinstance(entry.get("capabilities"), dict):
                continue
            for cap, meta in sorted(entry["capabilities"].items()):
                meta = meta if isinstance(meta, dict) else {}
                out.append(Approval(pid, str(entry.get("digest", "")), cap,
                                    str(meta.get("by", "")), str(meta.get("at", "")),
                                    str(entry.get("path", ""))))
        return out

    def effective(self, plugin_id: str, digest: str) -> frozenset[str]:
        """The capabilities granted to `plugin_id` while its module has `digest`."""
        try:
            entry = self._read().get(plugin_id)
        except ConfigError as exc:
            log.warning("plugin %s: no recorded approval applies: %s", plugin_id, exc.message,
                        extra={"plugin_id": plugin_id})
            return frozenset()  # an unreadable file grants nothing
        if not isinstance(entry, dict):
            return frozenset()
        if entry.get("digest") != digest:
            log.warning("plugin %s changed (digest %s); its recorded approvals are for %s and "
                        "are withheld until granted again", plugin_id, digest[7:19],
                        clean(entry.get("digest"), 32)[7:19], extra={"plugin_id": plugin_id})
            return frozenset()
        caps = entry.get("capabilities")
        return frozenset(c for c in caps if isinstance(c, str)) if isinstance(caps, dict) \
            else frozenset()

    def grant(self, plugin_id: str, digest: str, capabilities: list[str], by: str,
              path: str = "") -> None:
        """Record `capabilities` for `digest`; grants to an older digest are dropped."""
        with _write_lock:
            plugins = self._read()
            entry = plugins.get(plugin_id)
            if not isinstance(entry, dict) or entry.get("digest") != digest \
                    or not isinstance(entry.get("capabilities"), dict):
                entry = {"digest": digest, "capabilities": {}}
            entry["path"] = path
            stamp = _now()
            for cap in capabilities:
                entry["capabilities"][cap] = {"by": by, "at": stamp}
            plugins[plugin_id] = entry
            self._write(plugins)

    def revoke(self, plugin_id: str, capabilities: list[str] | None = None) -> int:
        """Remove the named grants (all when None); the number removed."""
        with _write_lock:
            plugins = self._read()
            entry = plugins.get(plugin_id)
            if not isinstance(entry, dict):
                return 0
            caps = entry.get("capabilities")
            caps = caps if isinstance(caps, dict) else {}
            names = list(caps) if capabilities is None else [c for c in capabilities
                                                              if c in caps]
            for cap in names:
                del caps[cap]
            if not caps:
                del plugins[plugin_id]
            self._write(plugins)
            return len(names)
