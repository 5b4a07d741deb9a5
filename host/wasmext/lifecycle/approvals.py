"""Recorded approvals: capabilities an operator granted a plugin, keyed to everything
that decides what the plugin can do.

    data_dir/approvals.json
    {"plugins": {"kb": {"digest": "sha256:...",          # the module
                        "manifest": "sha256:...",        # plugin.toml's bytes
                        "files": {"server.py": "sha256:..."},  # what it makes the host run
                        "path": "plugins/kb",
                        "capabilities": {"state": {"by": "ann", "at": "2026-11-23T19:00:00Z"}}}}}

Each grant says who gave it and when (the approval metadata of the reference
trust model: source path, hash, timestamp, approver). A grant holds only for
the `Subject` it was given to: the module's digest, the manifest's (a manifest
decides settings, the variables they read, sensitivity, MCP server commands)
and the digest of every file inside the plugin folder that the manifest makes
the host execute (a stdio MCP server's command and arguments). When any of them
changes, the host withholds the grants until an operator grants again, and
`Subject.changes` names what changed. A record written before manifests were
covered has no "manifest": it covers no manifest, so it is withheld too. Every
write is atomic (temp, fsync, rename).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from wasmext.errors import ConfigError
from wasmext.files import atomic_write, read_regular
from wasmext.manifest import Manifest
from wasmext.text import clean

__all__ = ["Approval", "ApprovalStore", "Grant", "Subject", "executed_files", "granted",
           "subject_of"]

log = logging.getLogger("wasmext.approvals")
MAX_FILE_BYTES = 4 * 2**20
# A file the manifest makes the host run is hashed in full up to this size; a
# bigger one (or more of them) is recorded as such, and changes when it changes size.
MAX_EXECUTED_BYTES = 64 * 2**20
MAX_EXECUTED_FILES = 32
_write_lock = threading.Lock()


@dataclass(frozen=True)
class Subject:
    """What an approval covers: the module, the manifest, and the files inside the plugin
    folder that the manifest makes the host execute (all as "sha256:..." digests)."""

    module: str
    manifest: str = ""  # "": a bare module, loaded without a plugin.toml
    files: Mapping[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The fields of an approvals.json entry that pin this subject."""
        return {"digest": self.module, "manifest": self.manifest, "files": dict(self.files)}

    def changes(self, entry: Mapping[str, Any]) -> list[str]:
        """What differs between this subject and a recorded entry (empty: covered)."""
        out = []
        if entry.get("digest") != self.module:
            out.append("module")
        # A record older than manifest pinning has no "manifest": it covers none.
        if entry.get("manifest", "") != self.manifest or ("manifest" not in entry
                                                          and self.manifest):
            out.append("plugin.toml")
        files = entry.get("files") if isinstance(entry.get("files"), dict) else {}
        assert isinstance(files, dict)
        for name in sorted(set(files) | set(self.files)):
            if files.get(name) != self.files.get(name):
                out.append(clean(name, 80))
        return out


def _file_digest(path: Path) -> str:
    # Non-blocking and checked after opening: a fifo put there never holds a load.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not-a-file"
        if info.st_size > MAX_EXECUTED_BYTES:
            return f"over-{MAX_EXECUTED_BYTES}-bytes:{info.st_size}:{info.st_mtime_ns}"
        h = hashlib.sha256()
        while chunk := fh.read(2**20):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def executed_files(manifest: Manifest) -> dict[str, str]:
    """The files inside the plugin folder that the manifest's stdio MCP servers run
    (their command, and any argument naming a file there, alone or as an option's
    `=value`), by relative name; a name that is a symlink pins the file it leads to."""
    folder = manifest.path.parent
    try:
        root = folder.resolve()
    except OSError:
        return {}
    out: dict[str, str] = {}
    beyond = hashlib.sha256()  # the files past MAX_EXECUTED_FILES: names, sizes, times
    past: set[str] = set()
    for server in manifest.mcp_servers:
        if server.transport != "stdio":
            continue
        for word in (server.command or "", *server.args):
            for name in _named(word):
                if "\0" in name:
                    continue
                try:
                    # Inside the folder by what the manifest wrote, whatever it resolves
                    # to: a server.py that is a symlink to a file elsewhere is run too,
                    # so that file's bytes are pinned under the name the manifest gave.
                    rel = Path(os.path.normpath(root / name)).relative_to(root)
                    path = (root / rel).resolve()
                    if not path.is_file() or rel.as_posix() in out or rel.as_posix() in past:
                        continue
                    if len(out) < MAX_EXECUTED_FILES:
                        out[rel.as_posix()] = _file_digest(path)
                        continue
                    # Not skipped: 32 harmless files named first left a later script
                    # unpinned. Past the cap a file counts by what a stat says of it.
                    info = path.stat()
                    beyond.update(f"{rel.as_posix()}\0{info.st_size}\0{info.st_mtime_ns}\n"
                                  .encode())
                    past.add(rel.as_posix())
                except (ValueError, OSError, RuntimeError):  # outside, unreadable, a loop
                    continue
    if past:
        out[f"({len(past)} more files)"] = f"stat:{beyond.hexdigest()}"
    return out


def _named(word: str) -> list[str]:
    """The file names a command-line word may stand for: the word, and the value of an
    `--option=value` word (`--config=conf.py`)."""
    if not word:
        return []
    if word.startswith("-") and "=" in word:
        return [word, word.partition("=")[2]]
    return [word]


@dataclass(frozen=True)
class Grant:
    """A config `[grants.ID]`: capabilities for the module `digest` (and, when the operator
    pins it, the plugin.toml `manifest`)."""

    digest: str
    capabilities: frozenset[str]
    manifest: str | None = None


def granted(plugin_id: str, subject: Subject, data_dir: Path,
            configured: Grant | None) -> frozenset[str]:
    """What a loaded plugin is granted beyond its call: the config's grant and the
    recorded approvals, each only while what it was given to is what loaded (a changed
    binary, manifest or server file must be approved again). A config grant's
    `mcp-server:` capabilities need its `manifest` pin: the manifest names the command."""
    out: frozenset[str] = frozenset()
    if configured is not None:
        pins = (("module", configured.digest, subject.module),
                ("plugin.toml", configured.manifest, subject.manifest))
        changed = [what for what, was, now in pins if was is not None and was != now]
        if changed:
            log.warning("plugin %s changed (%s); its [grants.%s] are withheld until renewed",
                        plugin_id, ", ".join(changed), plugin_id, extra={"plugin_id": plugin_id})
        else:
            out = configured.capabilities
            servers = sorted(c for c in out if c.startswith("mcp-server:"))
            if servers and configured.manifest is None and subject.manifest:
                # The manifest, not the module, says what command such a server runs: a
                # grant pinned to the module alone would run whatever any plugin.toml
                # beside it names (one an MCP client installed with `--manage`, say).
                log.warning("plugin %s: [grants.%s] gives %s without pinning plugin.toml "
                            "(manifest = \"sha256:...\", printed by `wasmext inspect`), "
                            "which decides the command it runs; withheld",
                            plugin_id, plugin_id, clean(", ".join(servers), 300),
                            extra={"plugin_id": plugin_id})
                out = out - set(servers)
    return out | ApprovalStore.in_data_dir(data_dir).effective(plugin_id, subject)


def subject_of(module_digest: str, manifest: Manifest | None) -> Subject:
    """The subject of a loaded plugin: `module_digest` ("sha256:...") and its manifest."""
    if manifest is None:
        return Subject(module_digest)
    return Subject(module_digest, manifest.source_digest, executed_files(manifest))


@dataclass(frozen=True)
class Approval:
    """One approved capability of a plugin version: who approved it and when."""

    plugin_id: str
    digest: str
    capability: str
    by: str
    at: str
    path: str = ""
    entry: Mapping[str, Any] = field(default_factory=dict)  # the whole record, for `changes`


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApprovalStore:
    """The approvals file of one data dir; read fresh on every question."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> ApprovalStore:
        """The store of approvals.json in the data dir."""
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
        """Every recorded approval, by plugin and capability."""
        out = []
        for pid, entry in sorted(self._read().items()):
            if not isinstance(entry, dict) or not isinstance(entry.get("capabilities"), dict):
                continue
            for cap, meta in sorted(entry["capabilities"].items()):
                meta = meta if isinstance(meta, dict) else {}
                out.append(Approval(pid, str(entry.get("digest", "")), cap,
                                    str(meta.get("by", "")), str(meta.get("at", "")),
                                    str(entry.get("path", "")), entry))
        return out

    def effective(self, plugin_id: str, subject: Subject) -> frozenset[str]:
        """The capabilities granted to `plugin_id` while it is `subject`."""
        try:
            entry = self._read().get(plugin_id)
        except ConfigError as exc:
            log.warning("plugin %s: no recorded approval applies: %s", plugin_id, exc.message,
                        extra={"plugin_id": plugin_id})
            return frozenset()  # an unreadable file grants nothing
        if not isinstance(entry, dict):
            return frozenset()
        changed = subject.changes(entry)
        if changed:
            log.warning("plugin %s changed (%s) since its approvals were recorded; they are "
                        "withheld until granted again", plugin_id, ", ".join(changed),
                        extra={"plugin_id": plugin_id})
            return frozenset()
        caps = entry.get("capabilities")
        return frozenset(c for c in caps if isinstance(c, str)) if isinstance(caps, dict) \
            else frozenset()

    def grant(self, plugin_id: str, subject: Subject, capabilities: list[str], by: str,
              path: str = "") -> None:
        """Record `capabilities` for `subject`; grants to an older subject are dropped."""
        with _write_lock:
            plugins = self._read()
            entry = plugins.get(plugin_id)
            if not isinstance(entry, dict) or subject.changes(entry) \
                    or not isinstance(entry.get("capabilities"), dict):
                entry = {**subject.record(), "capabilities": {}}
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
