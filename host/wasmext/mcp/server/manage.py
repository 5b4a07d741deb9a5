"""Runtime management over MCP: opt-in tools of `wasmext mcp serve` (docs/mcp-manage.md).

    wasmext mcp serve --manage --manage-source incoming     # or [manage] in wasmext.toml

    wasmext_plugins_list      every plugin: loaded or disabled, tools, asks for, granted
    wasmext_plugin_grants     one plugin's requested capabilities against its grants
    wasmext_plugin_enable     enable (persisted) and load it
    wasmext_plugin_disable    disable (persisted) and unload it
    wasmext_plugin_load       install a plugin folder, .wxb bundle or oci:// reference
                              and load it

The MCP client is trusted with none of the operator's powers beyond these:

- Granting stays the operator's act. A load installs the plugin as `wasmext
  install` does and loads it as any discovered folder, so it holds only what the
  config's `[grants.ID]` and the recorded approvals (`wasmext grant`) give its
  exact module and manifest: nothing, for a plugin the operator has not seen.
  No tool grants, and none touches approvals.json.
- The host's file system is not the client's. A path must lie inside one of the
  folders `[manage] sources` (or `--manage-source`) names once every symlink
  is resolved; each file is opened without following a final symlink and its
  real path is checked again on the open descriptor (a folder swapped for a
  link after the check is caught), must be a regular file and is size-capped.
  A folder is copied through `pack`, then installed from the bundle, so every
  bundle check applies (links, names, sizes, digests, the signature the config
  may require). Answers name plugin ids, never host paths.
- The host's network is not the client's either: an `oci://` load is pulled
  only when `REGISTRY/NAME` matches a pattern of `[manage] registries` (none by
  default), through `lifecycle.oci` with every check of it (digests, sizes, the
  deadline), plain http only to a loopback registry.
- What a manifest asks for is the plugin's text: each capability is shown cleaned
  and cut (at most `MAX_SHOWN_CAPABILITIES`), and the suggested `wasmext grant`
  line holds only well-formed ones, each shell-quoted, so pasting it runs nothing
  the plugin wrote.
- Plugins cannot reach these tools: they are not in the tool registry
  (`tool.call` never sees them), and their names have no `__`, so no plugin
  tool (`<id>__<name>`) can take one.

Each change is followed by the served lists' check, so clients hear
`notifications/tools/list_changed` as the plugin set changes.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import shlex
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext.capabilities import capability_problem
from wasmext.errors import ManageRefused
from wasmext.files import atomic_write
from wasmext.lifecycle.bundle import MAX_ARCHIVE_BYTES, MAX_ENTRY_BYTES, PLAIN_NAME, install, pack
from wasmext.manifest import ID_RE, load_folder, load_manifest
from wasmext.services.tools import Tool
from wasmext.text import clean

if TYPE_CHECKING:
    from wasmext.config import ManageSettings
    from wasmext.host import Host
    from wasmext.services.hostview import LoadedPlugin

__all__ = ["MANAGE_TOOLS", "Manager", "read_confined", "without_paths"]

log = logging.getLogger("wasmext.mcp.manage")

MANAGE_TOOLS = ("wasmext_plugins_list", "wasmext_plugin_grants", "wasmext_plugin_enable",
                "wasmext_plugin_disable", "wasmext_plugin_load")
MAX_PATH = 4096
MAX_SHOWN_CAPABILITIES = 64
MAX_CAPABILITY_CHARS = 200
_OPEN = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
         | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
_PROC_FD = Path("/proc/self/fd")
_ID_SCHEMA = {"type": "object", "properties": {"id": {
    "type": "string", "pattern": ID_RE.pattern, "description": "The plugin id."}},
    "required": ["id"], "additionalProperties": False}


def _shown(capabilities: Any) -> list[str]:
    """A manifest's capabilities as a client sees them: each one inert and cut, and
    no more than MAX_SHOWN_CAPABILITIES of them."""
    return [clean(str(c), MAX_CAPABILITY_CHARS) for c in
            list(capabilities)[:MAX_SHOWN_CAPABILITIES]]


def _grant_line(pid: str, missing: list[str]) -> str:
    """The `wasmext grant` command for what is missing: only capabilities a grant can
    say, printable and short, each quoted for a POSIX shell."""
    fit = [c for c in missing if len(c) <= MAX_CAPABILITY_CHARS and clean(c) == c
           and capability_problem(c) is None]
    return " ".join(["wasmext", "grant", pid, *(shlex.quote(c) for c in fit)])


def _within(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def read_confined(path: Path, roots: list[Path], cap: int) -> bytes:
    """The bytes of the regular file `path`, only if its real path lies under a root."""
    try:
        fd = os.open(path, _OPEN)
    except OSError as exc:
        raise ManageRefused(f"{path.name[:120]}: cannot open: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        # What was opened, wherever a link in the folders above pointed at that moment.
        real = Path(os.path.realpath(_PROC_FD / str(fd))) if _PROC_FD.is_dir() \
            else Path(os.path.realpath(path))
        if not _within(real, roots):
            raise ManageRefused(f"{path.name[:120]}: outside the folders the operator allows")
        if not stat.S_ISREG(info.st_mode):
            raise ManageRefused(f"{path.name[:120]}: not a regular file")
        if info.st_nlink > 1:  # the same file under another name, anywhere on the disk
            raise ManageRefused(f"{path.name[:120]}: a hard link; plain files only")
        if info.st_size > cap:
            raise ManageRefused(f"{path.name[:120]}: over {cap} bytes")
        chunks: list[bytes] = []
        total = 0
        while total <= cap:
            chunk = os.read(fd, cap + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:
            raise ManageRefused(f"{path.name[:120]}: over {cap} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


class Manager:
    """The management tools over one host, with the operator's [manage] settings."""

    def __init__(self, host: Host, settings: ManageSettings) -> None:
        self.host = host
        self.settings = settings

    # -- the tools ------------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        """The tools, as the MCP server serves them (never in the host's registry)."""
        def tool(name: str, description: str, schema: dict[str, Any],
                 fn: Callable[[dict[str, Any]], dict[str, Any]],
                 hints: dict[str, bool]) -> Tool:
            return Tool(name, description, schema, "host:manage",
                        lambda args, _session: fn(args), annotations=hints)

        load_schema = {"type": "object", "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": MAX_PATH,
                     "description": "A plugin folder or .wxb bundle inside a folder the "
                                    "operator allows (relative: to the first of them), or "
                                    "oci://REGISTRY/NAME:TAG (or @sha256:...) of a "
                                    "registry the operator allows."},
            "replace": {"type": "boolean", "description": "Replace an installed plugin "
                        "of the same id (never with an older version)."}},
            "required": ["path"], "additionalProperties": False}
        return [
            tool("wasmext_plugins_list", "List the plugins: loaded or disabled, their "
                 "tools, the capabilities each asks for and those granted.",
                 {"type": "object", "additionalProperties": False}, self.list_plugins,
                 {"readOnlyHint": True}),
            tool("wasmext_plugin_grants", "A plugin's requested capabilities against those "
                 "the operator granted; granting is the operator's (wasmext grant).",
                 _ID_SCHEMA, self.grants, {"readOnlyHint": True}),
            tool("wasmext_plugin_enable", "Enable a plugin of the plugin folders (remembered "
                 "across restarts) and load it.", _ID_SCHEMA, self.enable,
                 {"readOnlyHint": False, "idempotentHint": True, "destructiveHint": False}),
            tool("wasmext_plugin_disable", "Disable a plugin (remembered across restarts) "
                 "and unload it; its state is kept.", _ID_SCHEMA, self.disable,
                 {"readOnlyHint": False, "idempotentHint": True, "destructiveHint": True}),
            tool("wasmext_plugin_load", "Install a plugin folder or .wxb bundle from a "
                 "folder the operator allows (or an oci:// reference of an allowed "
                 "registry), and load it with no grants: the operator grants capabilities "
                 "(wasmext grant).", load_schema, self.load,
                 {"readOnlyHint": False, "destructiveHint": False, "openWorldHint": False}),
        ]

    def list_plugins(self, args: dict[str, Any]) -> dict[str, Any]:
        """Every loaded and disabled plugin, by id."""
        rows = [self._row(lp) for lp in self.host.plugins.values()]
        for pid, manifest in self.host.disabled.items():
            if pid not in self.host.plugins:
                rows.append({"id": pid, "version": manifest.version, "enabled": False,
                             "loaded": False, "tools": [],
                             "requested": _shown(manifest.capabilities), "granted": []})
        return {"plugins": sorted(rows, key=lambda r: str(r["id"]))}

    def grants(self, args: dict[str, Any]) -> dict[str, Any]:
        """One plugin's requested capabilities, its grants, and what is missing."""
        pid = self._id(args)
        lp = self.host.plugins.get(pid)
        if lp is not None:
            requested = list(lp.manifest.capabilities) if lp.manifest else []
            granted = sorted(lp.plugin.grants)
        elif pid in self.host.disabled:
            requested, granted = list(self.host.disabled[pid].capabilities), []
        else:
            raise ManageRefused(f"no plugin {pid!r}")
        missing = [c for c in requested if c not in granted]
        out: dict[str, Any] = {"id": pid, "loaded": lp is not None,
                               "requested": _shown(requested), "granted": granted,
                               "missing": _shown(missing)}
        if missing:
            out["operator"] = _grant_line(pid, missing)
        return out

    def enable(self, args: dict[str, Any]) -> dict[str, Any]:
        """Enable a plugin of the plugin folders and load it (a rescan)."""
        pid = self._id(args)
        if pid not in self._discovered():
            raise ManageRefused(f"no plugin {pid!r} in the plugin folders")
        before = len(self.host.load_errors)
        self.host.enable(pid)
        self.host.rescan()
        return self._outcome(pid, before, enabled=True)

    def disable(self, args: dict[str, Any]) -> dict[str, Any]:
        """Disable a plugin and unload it now."""
        pid = self._id(args)
        if pid not in self.host.plugins and pid not in self._discovered():
            raise ManageRefused(f"no plugin {pid!r}")
        self.host.disable(pid)
        return {"id": pid, "enabled": False, "loaded": pid in self.host.plugins}

    def load(self, args: dict[str, Any]) -> dict[str, Any]:
        """Install a folder or bundle from an allowed folder, or an `oci://` reference from
        an allowed registry, then load it (no grants)."""
        dest = next((d for src, d in self.host.plugin_dirs
                     if src == self.settings.install_to), None)
        if dest is None:
            raise ManageRefused(f"no {self.settings.install_to} plugin folder to install "
                                "into ([plugins] in wasmext.toml)")
        raw = args.get("path")
        if not isinstance(raw, str) or not raw or "\x00" in raw or len(raw) > MAX_PATH:
            raise ManageRefused("'path' must be a path")
        if raw.startswith("oci://"):
            target = self._pull(raw, dest, args.get("replace") is True)
        else:
            target = self._install_path(raw, dest, args.get("replace") is True)
        pid = target.name
        log.warning("MCP management: installed plugin %s (no grants but the operator's)",
                    pid, extra={"plugin_id": pid, "event": "manage.load"})
        before = len(self.host.load_errors)
        self.host.rescan()
        return self._outcome(pid, before, enabled=self.host.enable_state.is_enabled(pid))

    def _pull(self, raw: str, dest: Path, replace: bool) -> Path:
        """An `oci://` install, only from a registry and name the operator allows (the
        host would otherwise fetch any URL a client names, its own network included)."""
        try:
            from wasmext.lifecycle import oci  # the `oci` extra: only when asked for
        except ImportError:
            raise ManageRefused("oci:// loads need the oci extra: pip install "
                                "'wasmext[oci]'") from None
        ref = oci.parse_reference(raw)
        name = f"{ref.registry}/{ref.repository}"
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in self.settings.registries):
            raise ManageRefused(f"{clean(name, 200)}: not a registry and name the operator "
                                "allows ([manage] registries)")
        target, _pulled = oci.install(ref, dest, trusted=self.host.config.trusted_keys,
                                      require_signature=self.host.config.require_signature,
                                      replace=replace)
        return target

    def _install_path(self, raw: str, dest: Path, replace: bool) -> Path:
        """A folder or `.wxb` install from inside the allowed folders."""
        roots = [Path(os.path.realpath(s)) for s in self.settings.sources]
        if not roots:
            raise ManageRefused("no folder to load plugins from: the operator names them in "
                                "[manage] sources or with --manage-source")
        given = Path(raw)
        path = given if given.is_absolute() else Path(self.settings.sources[0]) / given
        real = Path(os.path.realpath(path))
        if not _within(real, roots):
            raise ManageRefused(f"{clean(raw, 200)}: outside the folders the operator allows")
        with tempfile.TemporaryDirectory(prefix="wasmext-manage-") as tmp:
            bundle = Path(tmp) / "plugin.wxb"
            if real.is_dir():
                self._pack_copy(real, roots, Path(tmp) / "copy", bundle)
            elif real.suffix == ".wxb":
                atomic_write(bundle, read_confined(real, roots, MAX_ARCHIVE_BYTES))
            else:
                raise ManageRefused(f"{clean(raw, 200)}: neither a plugin folder nor a "
                                    ".wxb bundle")
            return install(bundle, dest, trusted=self.host.config.trusted_keys,
                           require_signature=self.host.config.require_signature,
                           replace=replace)

    # -- helpers ---------------------------------------------------------------------------

    def _pack_copy(self, folder: Path, roots: list[Path], copy: Path, bundle: Path) -> None:
        """Copy a plugin folder's files (each read confined) and pack the copy."""
        copy.mkdir()
        atomic_write(copy / "plugin.toml", read_confined(folder / "plugin.toml", roots,
                                                         MAX_ENTRY_BYTES))
        manifest = load_manifest(copy / "plugin.toml")
        names = [manifest.wasm_name] + [n for n in ("README.md", "README")
                                         if (folder / n).exists()]
        for name in names:
            if not PLAIN_NAME.match(name):
                raise ManageRefused(f"plugin {manifest.id}: {name[:120]!r} is not a plain "
                                    "file name")
            atomic_write(copy / name, read_confined(folder / name, roots, MAX_ENTRY_BYTES))
        load_folder(copy)
        pack(copy, bundle)

    def _id(self, args: dict[str, Any]) -> str:
        pid = args.get("id")
        if not isinstance(pid, str) or not ID_RE.match(pid):
            raise ManageRefused("'id' must be a plugin id")
        return pid

    def _discovered(self) -> set[str]:
        from wasmext.discovery import discover

        return {d.manifest.id for d in discover(self.host.plugin_dirs)
                if d.manifest is not None}

    def _row(self, lp: LoadedPlugin) -> dict[str, Any]:
        owner = f"plugin:{lp.id}"
        return {"id": lp.id, "version": lp.manifest.version if lp.manifest else "",
                "enabled": True, "loaded": True, "source": lp.source,
                "tools": sorted(n for n, t in dict(self.host.tools.tools).items()
                                if t.owner == owner),
                "requested": _shown(lp.manifest.capabilities) if lp.manifest else [],
                "granted": sorted(lp.plugin.grants)}

    def _outcome(self, pid: str, before: int, *, enabled: bool) -> dict[str, Any]:
        lp = self.host.plugins.get(pid)
        if lp is not None:
            return {**self._row(lp), "enabled": enabled}
        out: dict[str, Any] = {"id": pid, "enabled": enabled, "loaded": False}
        errors = [e for e in self.host.load_errors[before:] if e.plugin_id == pid]
        if errors:  # the operator's paths stay the operator's
            out["error"] = clean(without_paths(errors[-1].describe()), 500)
        return out


def without_paths(text: str) -> str:
    """`text` with absolute paths cut to their last part (the host's folders are the
    operator's business, not an MCP client's)."""
    return re.sub(r"(?:/[^\s/:'\"]+)+/([^\s/:'\"]+)", r"\1", text)
