"""wasmext.toml: the host's configuration, validated with errors naming the field.

    [host]
    data_dir = ".wasmext"        # enable/disable state lives here
    hooks = true                 # global switch: false runs no plugin hook
    auto_enable = true           # plugins seen for the first time start enabled
    default_timeout_ms = 1000

    [plugins]
    user_dir = "~/.config/wasmext/plugins"   # runs before the workspace
    workspace_dir = "plugins"
    enabled = ["pii-mask"]       # initial choices; `wasmext enable/disable` persist
    disabled = []

    [limits]                     # defaults for every plugin
    fuel_per_call = 50_000_000
    [limits.cap]                 # host policy: no plugin gets more
    memory_bytes = 268_435_456

    [grants.pii-mask]            # capabilities, keyed to the module's digest
    digest = "sha256:..."
    capabilities = ["state"]

    [state]                      # plugin state: sqlite (default), memory or redis
    backend = "sqlite"           # data_dir/state.db; redis needs url = "redis://..."
    ttl_seconds = 3600           # and any other StateLimits field

    [mcp]                        # MCP servers whose tools join the registry
    enabled = true               # the global switch
    [mcp.servers.calc]
    transport = "stdio"          # stdio, sse or http (streamable HTTP; needs url)
    command = "python"
    args = ["calc_server.py"]
    env = { TOKEN = "${CALC_TOKEN}" }   # ${VAR}: missing ones warn and read as ""
    call_timeout_s = 30

    [trust]                      # signed bundles (docs/lifecycle.md)
    require_signature = false    # true: only folders installed from a bundle signed
    keys = ["ed25519:..."]       # by one of these keys load (and install)

    [extensions.pii_guard]       # a remote extension (docs/cluster.md)
    type = "validator"
    subject = "wasmext.ext.validate.pii_guard.v1"
    timeout_ms = 100

    [llm]                        # the model behind llm.complete (services.llm_config)
    url = "http://127.0.0.1:8000/v1"
    model = "small-model"

    [plugin.normalize-text]      # per-plugin settings, limits, failure policy, priority
    settings = { lowercase = true }
    priority = 40
    limits = { timeout_ms = 200 }
    failure = "closed"

Relative paths are relative to the file's folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wasmext._toml import ConfigTextError, parse_text, read_capped
from wasmext.cluster.registry import RemoteExtension, parse_registry
from wasmext.errors import ConfigError
from wasmext.files import atomic_write
from wasmext.lifecycle.signing import is_public_key
from wasmext.manifest import FAILURE_POLICIES, ID_RE, type_problems
from wasmext.mcp.config import McpServerConfig, parse_mcp
from wasmext.mcp.config import need as _need
from wasmext.mcp.config import table as _table
from wasmext.sandbox.limits import Limits
from wasmext.services.http_config import HttpSettings, parse_http
from wasmext.services.llm import LlmSettings
from wasmext.services.llm_config import parse_llm
from wasmext.state import StateStore

__all__ = [
    "EnableState",
    "Grant",
    "HostConfig",
    "McpServerConfig",
    "PluginOverrides",
    "load_config",
    "open_store",
]


_SECTIONS = {"host", "plugins", "limits", "grants", "plugin", "state", "mcp", "trust",
             "extensions", "llm", "http"}


@dataclass(frozen=True)
class Grant:
    digest: str
    capabilities: frozenset[str]


@dataclass(frozen=True)
class PluginOverrides:
    settings: Mapping[str, Any] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    failure: str | None = None
    priority: int | None = None


@dataclass(frozen=True)
class HostConfig:
    path: Path | None = None
    data_dir: Path = Path(".wasmext")
    hooks: bool = True
    auto_enable: bool = True
    default_timeout_ms: int | None = None
    user_dir: Path | None = None
    workspace_dir: Path | None = None
    enabled: frozenset[str] = frozenset()
    disabled: frozenset[str] = frozenset()
    limits: Limits = field(default_factory=Limits)
    cap: Limits | None = None
    grants: Mapping[str, Grant] = field(default_factory=dict)
    overrides: Mapping[str, PluginOverrides] = field(default_factory=dict)
    state_backend: str = "sqlite"  # sqlite (data_dir/state.db), memory, redis
    state_url: str | None = None   # redis://... for the redis backend
    state_limits: Mapping[str, Any] = field(default_factory=dict)
    mcp_enabled: bool = True  # the global MCP switch
    mcp_servers: tuple[McpServerConfig, ...] = ()
    require_signature: bool = False  # [trust]: only bundles signed by trusted_keys load
    trusted_keys: tuple[str, ...] = ()  # "ed25519:<base64 of the 32-byte public key>"
    extensions: Mapping[str, RemoteExtension] = field(default_factory=dict)  # remote (NATS)
    llm: LlmSettings = field(default_factory=LlmSettings)  # the [llm] section
    http: HttpSettings = field(default_factory=HttpSettings)  # the [http] section

    def plugin_dirs(self) -> list[tuple[str, Path]]:
        """(source, folder) in precedence order: user before workspace."""
        return [(src, d) for src, d in (("user", self.user_dir),
                                         ("workspace", self.workspace_dir)) if d is not None]


def _ids(raw: Any, path: Path | None, fld: str) -> frozenset[str]:
    _need(isinstance(raw, list) and all(isinstance(x, str) and ID_RE.match(x) for x in raw),
          path, fld, "must be an array of plugin ids")
    return frozenset(raw)


def _limits(raw: Any, base: Limits, path: Path | None, fld: str) -> Limits:
    try:
        return base.replace(**_table(raw, path, fld))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path or 'config'}: field '{fld}': {exc}") from exc


_PLUGIN_TYPES = {"settings": dict[str, Any], "priority": int, "limits": dict[str, int],
                 "failure": str}
CONFIG_TYPES: dict[str, Any] = {
    "host": {"data_dir": str, "hooks": bool, "auto_enable": bool, "default_timeout_ms": int},
    "plugins": {"user_dir": str, "workspace_dir": str, "enabled": list[str],
                "disabled": list[str]},
    "limits": dict[str, Any], "grants": dict[str, dict[str, Any]],
    "state": {"backend": str, "url": str}, "mcp": dict[str, Any],
    "plugin": dict[str, dict[str, Any]],
}


def parse_config(data: Mapping[str, Any], path: Path | None = None) -> HostConfig:
    unknown = sorted(set(data) - _SECTIONS)
    _need(not unknown, path, unknown[0] if unknown else "", "unknown section")
    problems = type_problems(CONFIG_TYPES, data)
    for pid, over in (data.get("plugin") or {}).items() if isinstance(data.get("plugin"),
                                                                      dict) else ():
        problems += type_problems(_PLUGIN_TYPES, over, f"plugin.{pid}.")
    if problems:  # every type problem at once, each naming its field
        raise ConfigError(f"{path or 'config'}: "
                          + "; ".join(f"field '{f}': {w}" for f, w in problems))
    base = path.parent if path else Path.cwd()

    def where(raw: Any, fld: str) -> Path:
        _need(isinstance(raw, str), path, fld, "must be a path string")
        p = Path(os.path.expanduser(raw))
        return p if p.is_absolute() else base / p

    host = _table(data.get("host", {}), path, "host")
    flags = {}
    for key, default in (("hooks", True), ("auto_enable", True)):
        flags[key] = host.get(key, default)
        _need(isinstance(flags[key], bool), path, f"host.{key}", "must be a bool")
    timeout = host.get("default_timeout_ms")
    _need(timeout is None or (type(timeout) is int and timeout > 0), path,
          "host.default_timeout_ms", "must be a positive int")
    plugins = _table(data.get("plugins", {}), path, "plugins")
    limits_raw = _table(data.get("limits", {}), path, "limits")
    cap_raw = limits_raw.pop("cap", None)
    limits = _limits(limits_raw, Limits(), path, "limits")
    if timeout is not None and "timeout_ms" not in limits_raw:
        limits = limits.replace(timeout_ms=timeout)
    cap = _limits(cap_raw, Limits(), path, "limits.cap") if cap_raw is not None else None
    grants = {}
    for pid, g in _table(data.get("grants", {}), path, "grants").items():
        fld = f"grants.{pid}"
        g = _table(g, path, fld)
        _need(bool(ID_RE.match(pid)), path, fld, "not a plugin id")
        digest = g.get("digest")
        _need(isinstance(digest, str) and digest.startswith("sha256:") and len(digest) == 71,
              path, f"{fld}.digest", "must be 'sha256:' and 64 hex digits")
        caps = g.get("capabilities", [])
        _need(isinstance(caps, list) and all(isinstance(c, str) for c in caps), path,
              f"{fld}.capabilities", "must be an array of strings")
        grants[pid] = Grant(str(digest), frozenset(caps))
    overrides = {}
    for pid, o in _table(data.get("plugin", {}), path, "plugin").items():
        fld = f"plugin.{pid}"
        o = _table(o, path, fld)
        _need(bool(ID_RE.match(pid)), path, fld, "not a plugin id")
        failure = o.get("failure")
        _need(failure is None or failure in FAILURE_POLICIES, path, f"{fld}.failure",
              f"must be one of {FAILURE_POLICIES}")
        lim = _table(o.get("limits", {}), path, f"{fld}.limits")
        _limits(lim, Limits(), path, f"{fld}.limits")
        prio = o.get("priority")
        _need(prio is None or (type(prio) is int and 0 <= prio <= 100), path,
              f"{fld}.priority", "must be an int 0-100")
        overrides[pid] = PluginOverrides(_table(o.get("settings", {}), path, f"{fld}.settings"),
                                         lim, failure, prio)
    state = _table(data.get("state", {}), path, "state")
    backend = state.pop("backend", "sqlite")
    _need(backend in ("sqlite", "memory", "redis"), path, "state.backend",
          "must be sqlite, memory or redis")
    url = state.pop("url", None)
    _need(url is None or isinstance(url, str), path, "state.url", "must be a string")
    _need(backend != "redis" or url is not None, path, "state.url",
          "the redis backend needs a url such as redis://127.0.0.1:6379/0")
    try:
        from wasmext.state import StateLimits

        StateLimits().replace(**state)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path or 'config'}: field 'state': {exc}") from exc
    mcp_enabled, mcp_servers = parse_mcp(_table(data.get("mcp", {}), path, "mcp"), path)
    trust = _table(data.get("trust", {}), path, "trust")
    _need(not set(trust) - {"require_signature", "keys"}, path, "trust", "unknown key")
    require_signature = trust.get("require_signature", False)
    _need(isinstance(require_signature, bool), path, "trust.require_signature", "must be a bool")
    keys = trust.get("keys", [])
    _need(isinstance(keys, list) and all(isinstance(k, str) and is_public_key(k) for k in keys),
          path, "trust.keys", "must be an array of 'ed25519:<base64>' public keys")
    try:
        extensions = parse_registry(_table(data.get("extensions", {}), path, "extensions"))
    except ConfigError as exc:
        raise ConfigError(f"{path or 'config'}: {exc.message}") from None
    return HostConfig(
        require_signature=require_signature, trusted_keys=tuple(keys),
        extensions=extensions,
        llm=parse_llm(data.get("llm", {}), path), http=parse_http(data.get("http", {}), path),
        mcp_enabled=mcp_enabled, mcp_servers=mcp_servers,
        state_backend=backend, state_url=url, state_limits=state,
        path=path,
        data_dir=where(host.get("data_dir", ".wasmext"), "host.data_dir"),
        hooks=flags["hooks"], auto_enable=flags["auto_enable"], default_timeout_ms=timeout,
        user_dir=where(plugins["user_dir"], "plugins.user_dir") if "user_dir" in plugins
        else None,
        workspace_dir=where(plugins["workspace_dir"], "plugins.workspace_dir")
        if "workspace_dir" in plugins else None,
        enabled=_ids(plugins.get("enabled", []), path, "plugins.enabled"),
        disabled=_ids(plugins.get("disabled", []), path, "plugins.disabled"),
        limits=limits, cap=cap, grants=grants, overrides=overrides)


def load_config(path: str | Path) -> HostConfig:
    """Read and validate a wasmext.toml, under the size and nesting caps of `_toml`."""
    path = Path(path)
    try:
        data = parse_text(read_capped(path))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except ConfigTextError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    return parse_config(data, path)


class EnableState:
    """Which plugins are enabled, persisted in data_dir/plugins.json (atomically)."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self.path = config.data_dir / "plugins.json"
        self._choices: dict[str, bool] = {}
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            choices = raw.get("enabled", {}) if isinstance(raw, dict) else {}
            self._choices = {k: v for k, v in choices.items()
                             if isinstance(k, str) and isinstance(v, bool)}
        except (OSError, ValueError, RecursionError):
            self._choices = {}

    def is_enabled(self, plugin_id: str) -> bool:
        if plugin_id in self._choices:
            return self._choices[plugin_id]
        if plugin_id in self.config.disabled:
            return False
        if plugin_id in self.config.enabled:
            return True
        return self.config.auto_enable

    def set(self, plugin_id: str, enabled: bool) -> None:
        self._choices[plugin_id] = enabled
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps({"enabled": self._choices}, indent=1, sort_keys=True))


def open_store(config: HostConfig) -> StateStore:
    """The store a host config asks for."""
    from wasmext.state import MemoryStore, SQLiteStore, StateLimits

    limits = StateLimits().replace(**config.state_limits)
    if config.state_backend == "memory":
        return MemoryStore(limits)
    if config.state_backend == "redis":
        from wasmext.state.redis.store import RedisStore

        return RedisStore(limits=limits, url=config.state_url)
    return SQLiteStore.in_data_dir(config.data_dir, limits)
