"""HostConfig: what a validated wasmext.toml decides, as the host takes it.

Plain frozen dataclasses whose defaults are a host without a config file; the file's
schema (pydantic, `configfile`) makes one of these and is imported only to parse a file.
`wasmext.config` documents the file and re-exports these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext.cluster.natsauth import ENV_PREFIX, NatsAuth
from wasmext.discovery import PACKAGES
from wasmext.lifecycle.approvals import Grant
from wasmext.observe.tracing import TracingSettings
from wasmext.sandbox.engine import EngineConfig
from wasmext.sandbox.fsgrants import FsQuota
from wasmext.sandbox.limits import Limits
from wasmext.services.http.settings import HttpSettings
from wasmext.services.llm.service import LlmSettings
from wasmext.services.ticks import TickPolicy

if TYPE_CHECKING:
    from wasmext.cluster.registry import RemoteExtension, RemotePluginEntry
    from wasmext.mcp.config import McpServerConfig
    from wasmext.services.agent_config import AgentSpec

__all__ = ["HOST_CREDENTIAL_ENV", "HostConfig", "ManageSettings", "PluginOverrides"]

# Credentials the host (or a library it drives) reads from fixed variable names, beside
# the ${VAR}s of its config: the NATS links' and the JetStream state's login (a URL may
# carry one too), the OTLP exporter's headers, the registry login of install/push.
HOST_CREDENTIAL_ENV = frozenset({
    ENV_PREFIX + "URL", ENV_PREFIX + "USER", ENV_PREFIX + "PASSWORD", ENV_PREFIX + "TOKEN",
    "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "ORAS_USER", "ORAS_PASS"})


@dataclass(frozen=True)
class PluginOverrides:
    """What the host config decides for one plugin ([plugin.ID])."""

    settings: Mapping[str, Any] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    failure: str | None = None
    priority: int | None = None
    env: frozenset[str] = frozenset()  # environment variables the operator lets it read
    # `mcp serve` passes on its tools' hints that claim safety (mcp.server.hints)
    trust_tool_hints: bool = False


@dataclass(frozen=True)
class ManageSettings:
    """[manage]: whether `wasmext mcp serve` offers its management tools, the folders a
    client may load plugins from, and where a load installs."""

    enabled: bool = False
    sources: tuple[Path, ...] = ()
    install_to: str = "workspace"
    registries: tuple[str, ...] = ()  # fnmatch patterns of REGISTRY/NAME for oci:// loads


@dataclass(frozen=True)
class HostConfig:
    """A validated wasmext.toml."""

    path: Path | None = None
    data_dir: Path = Path(".wasmext")
    hooks: bool = True
    auto_enable: bool = True
    default_timeout_ms: int | None = None
    ticks: TickPolicy = field(default_factory=TickPolicy)  # [host] tick_* bounds
    # [host] gc_freeze: whether the `wasmext` commands call `tune_gc()` after start-up
    # (an application embedding the host decides for itself; the library never does).
    gc_freeze: bool = True
    # [host] instance_pool: the engine's instance slots (sandbox.engine; 0 maps each
    # instance's memory on demand)
    instance_pool: int = EngineConfig.instance_pool
    user_dir: Path | None = None
    workspace_dir: Path | None = None
    user_extensions: bool = True  # the operator's switch for user-supplied plugins
    entry_points: bool = False  # also plugins installed Python packages declare
    enabled: frozenset[str] = frozenset()
    disabled: frozenset[str] = frozenset()
    limits: Limits = field(default_factory=Limits)
    cap: Limits | None = None
    grants: Mapping[str, Grant] = field(default_factory=dict)
    overrides: Mapping[str, PluginOverrides] = field(default_factory=dict)
    state_backend: str = "sqlite"  # sqlite (data_dir/state.db), memory, redis, jetstream
    state_url: str | None = None   # redis://... or nats://... (jetstream: else [nats] url)
    state_bucket: str = "wasmext_state"  # the jetstream backend's key-value bucket
    state_replicas: int = 1  # the bucket's replicas, if this host creates it
    state_limits: Mapping[str, Any] = field(default_factory=dict)
    mcp_enabled: bool = True  # the global MCP switch
    mcp_servers: tuple[McpServerConfig, ...] = ()
    require_signature: bool = False  # [trust]: only bundles signed by trusted_keys load
    trusted_keys: tuple[str, ...] = ()  # "ed25519:<base64 of the 32-byte public key>"
    extensions: Mapping[str, RemoteExtension] = field(default_factory=dict)  # remote (NATS)
    nats: NatsAuth = field(default_factory=NatsAuth)  # [nats]: url, credentials, TLS
    # [remote.ID]: whole plugins served by workers (cluster.plugins.attach_remote)
    remote: Mapping[str, RemotePluginEntry] = field(default_factory=dict)
    extensions_enabled: bool = True  # [extensions] enabled: false loads no plugin at all
    extension_dirs: tuple[Path, ...] = ()  # [extensions] directories, after the two above
    llm: LlmSettings = field(default_factory=LlmSettings)  # the [llm] section
    http: HttpSettings = field(default_factory=HttpSettings)  # the [http] section
    tracing: TracingSettings = field(default_factory=TracingSettings)  # [tracing]: off
    manage: ManageSettings = field(default_factory=ManageSettings)  # the [manage] section
    fs: FsQuota = field(default_factory=FsQuota)  # the [fs] section: folder grants' bounds
    # [agents.NAME]: agents plugins may call (the Host imports the targets when it starts)
    agents: Mapping[str, AgentSpec] = field(default_factory=dict)
    # Variables the host reads as credentials (the [llm] key, every ${VAR} of the
    # host's own config, the fixed names of HOST_CREDENTIAL_ENV): no plugin reads them,
    # whatever its manifest or [plugin.ID] env.
    credential_env: frozenset[str] = HOST_CREDENTIAL_ENV

    def plugin_dirs(self) -> list[tuple[str, Path]]:
        """(source, folder) in precedence order: user (only while `user_extensions` is
        on), workspace, then `extension_dirs`, then (with `entry_points`) installed
        packages; none at all when `extensions_enabled` is false."""
        if not self.extensions_enabled:
            return []
        user = self.user_dir if self.user_extensions else None
        dirs = [(src, d) for src, d in (("user", user),
                                        ("workspace", self.workspace_dir)) if d is not None] \
            + [("workspace", d) for d in self.extension_dirs]
        return [*dirs, PACKAGES] if self.entry_points else dirs
