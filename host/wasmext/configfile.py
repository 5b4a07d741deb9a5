"""wasmext.toml's schema: a pydantic model per section, every problem at once.

`wasmext.config` documents the file and imports this module only when a file (or a
decoded table) is parsed: a command run without a config, and `import wasmext.host`,
build none of these models. Some sections are kept beside what they configure
(`McpSection`, `LlmSection`, `HttpSection`, `TracingSection`, `NatsTable`,
`ExtensionSpec`, `RemotePluginSpec`, `AgentTable`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from wasmext.capabilities import capability_problem
from wasmext.cluster.natsconfig import NatsTable
from wasmext.cluster.registry import ExtensionId, ExtensionSpec, RemotePluginSpec
from wasmext.hostconfig import HostConfig, ManageSettings, PluginOverrides
from wasmext.lifecycle.approvals import Grant
from wasmext.lifecycle.signing import is_public_key
from wasmext.manifest import ID_RE
from wasmext.mcp.config import McpSection
from wasmext.observe.tracing_config import TracingSection
from wasmext.sandbox.engine import MAX_INSTANCE_POOL, EngineConfig
from wasmext.sandbox.fsgrants import FsQuota
from wasmext.sandbox.limits import WASM_PAGE, Limits
from wasmext.services.agent_config import AgentName, AgentTable
from wasmext.services.http.config import HttpSection
from wasmext.services.llm.config import LlmSection
from wasmext.services.ticks import TickPolicy
from wasmext.state import StateLimits
from wasmext.validation import SECTION, Count, Nonnegative, problem

__all__ = ["ConfigFile", "host_config"]

_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def _plugin_id(value: str) -> str:
    if not ID_RE.match(value):
        problem("not a plugin id (lowercase letters, digits and hyphens, 1-64)")
    return value


def _path_text(value: str) -> str:
    if "\x00" in value:
        problem("must be a path (no NUL character)")
    return value


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        problem("must be an environment variable name")
    return value


def _capability(value: str) -> str:
    # A typo is refused here, as `wasmext grant` refuses it: otherwise it is a grant
    # nothing ever checks, and the plugin is denied what the operator meant to allow.
    # A name near no known capability may be an embedding application's own.
    reason = capability_problem(value, label="the item", custom=True)
    if reason is not None:
        problem(reason)
    return value


def _public_key(value: str) -> str:
    if not is_public_key(value):
        problem("must be an 'ed25519:<base64>' public key")
    return value


PluginId = Annotated[str, AfterValidator(_plugin_id)]
PathText = Annotated[str, AfterValidator(_path_text)]
_Wasm32 = Annotated[int, Field(strict=True, gt=0, lt=2**32)]  # a wasm32 length
_Ratio = Annotated[float, Field(strict=True, gt=0, le=1)]
_Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]


class HostTable(BaseModel):
    """The [host] table: the data folder, the hook switch, auto-enable, a default timeout."""

    model_config = SECTION

    data_dir: PathText = ".wasmext"
    hooks: bool = True
    auto_enable: bool = True
    default_timeout_ms: Count | None = None
    tick_min_interval_ms: Count = TickPolicy.min_interval_ms
    max_ticking_plugins: Count = TickPolicy.max_ticking_plugins
    gc_freeze: bool = True
    instance_pool: Annotated[int, Field(strict=True, ge=0, le=MAX_INSTANCE_POOL)] = \
        EngineConfig.instance_pool


class PluginsTable(BaseModel):
    """The [plugins] table: the plugin folders and the initial enable choices."""

    model_config = SECTION

    user_dir: PathText | None = None
    workspace_dir: PathText | None = None
    user_extensions: bool = True
    entry_points: bool = False
    enabled: list[PluginId] = []
    disabled: list[PluginId] = []


class LimitsTable(BaseModel):
    """The Limits fields a table changes ([limits], [limits.cap], [plugin.ID] limits)."""

    model_config = SECTION

    fuel_per_call: Count | None = None
    memory_bytes: Annotated[int, Field(strict=True, ge=WASM_PAGE)] | None = None
    table_elements: Count | None = None
    timeout_ms: Count | None = None
    max_input_bytes: _Wasm32 | None = None
    max_output_bytes: _Wasm32 | None = None
    max_host_calls: Count | None = None
    host_call_timeout_ms: Count | None = None
    max_host_request_bytes: Count | None = None
    max_msgpack_depth: Count | None = None
    max_wasm_stack_bytes: Count | None = None
    max_log_line_bytes: Count | None = None
    max_log_lines: Count | None = None

    def given(self) -> dict[str, int]:
        """The fields the table sets."""
        return {k: v for k in self.model_fields_set if isinstance(v := getattr(self, k), int)}


class TopLimitsTable(LimitsTable):
    """[limits]: every plugin's defaults, and [limits.cap], the host's policy."""

    cap: LimitsTable | None = None


class GrantTable(BaseModel):
    """One [grants.ID] table: capabilities for the module with this digest (and, when
    `manifest` is given, the plugin.toml with that digest)."""

    model_config = SECTION

    digest: str
    manifest: str | None = None
    capabilities: list[Annotated[str, AfterValidator(_capability)]] = []

    @field_validator("digest", "manifest")
    @classmethod
    def _digest(cls, value: str | None) -> str | None:
        if value is not None and not _DIGEST_RE.match(value):
            problem("must be 'sha256:' and 64 lowercase hex digits")
        return value


class PluginTable(BaseModel):
    """One [plugin.ID] table: a plugin's settings, limits, failure policy, priority."""

    model_config = SECTION

    settings: dict[str, Any] = {}
    limits: LimitsTable = LimitsTable()
    failure: Literal["open", "closed", "reload"] | None = None
    priority: Annotated[int, Field(strict=True, ge=0, le=100)] | None = None
    env: list[Annotated[str, AfterValidator(_env_name)]] = []
    trust_tool_hints: bool = False


class StateTable(BaseModel):
    """[state]: the backend and the StateLimits fields."""

    model_config = SECTION

    backend: Literal["sqlite", "memory", "redis", "jetstream"] = "sqlite"
    url: str | None = Field(default=None, validate_default=True)
    bucket: Annotated[str, Field(strict=True, pattern=r"^[A-Za-z0-9_-]{1,64}$")] | None = None
    replicas: Annotated[int, Field(strict=True, ge=1, le=5)] | None = None
    ttl_seconds: _Finite | None = None
    max_ttl_seconds: _Finite | None = None
    max_plugin_bytes: Nonnegative | None = None
    max_session_bytes: Nonnegative | None = None
    session_warn_ratio: _Ratio | None = None
    max_keys: Count | None = None
    max_key_bytes: Count | None = None
    entry_overhead_bytes: Nonnegative | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and info.data.get("backend") == "redis":
            problem("the redis backend needs a url such as redis://127.0.0.1:6379/0")
        return value

    def limits(self) -> dict[str, Any]:
        """The StateLimits fields the table sets."""
        return {k: v for k in self.model_fields_set - {"backend", "url", "bucket", "replicas"}
                if (v := getattr(self, k)) is not None}

    @model_validator(mode="after")
    def _together(self) -> StateTable:
        try:  # the rules between fields (ttl within max_ttl, ...) are StateLimits' own
            StateLimits().replace(**self.limits())
        except (TypeError, ValueError) as exc:
            problem(str(exc))
        return self


class FsSection(BaseModel):
    """The [fs] table: the bounds of every folder grant (`sandbox.wasifs.FsQuota`)."""

    model_config = SECTION

    max_bytes: Count = FsQuota.max_bytes
    max_files: Count = FsQuota.max_files
    max_io_bytes: Count = FsQuota.max_io_bytes

    def quota(self) -> FsQuota:
        """The FsQuota these bounds make."""
        return FsQuota(self.max_bytes, self.max_files, self.max_io_bytes)


class TrustTable(BaseModel):
    """The [trust] table: whether bundles must be signed, and by which keys."""

    model_config = SECTION

    require_signature: bool = False
    keys: list[Annotated[str, AfterValidator(_public_key)]] = []


class ExtensionsSection(BaseModel):
    """[extensions]: the switch for every plugin, more plugin folders, and the remote
    extensions, one `[extensions.ID]` table each (so `enabled` and `directories` are no
    extension's id)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)

    enabled: bool = True
    directories: list[PathText] = []
    __pydantic_extra__: dict[ExtensionId, ExtensionSpec] = Field(init=False)

    def entries(self) -> dict[str, ExtensionSpec]:
        """The remote extensions, by id."""
        return dict(self.__pydantic_extra__ or {})


class ManageTable(BaseModel):
    """[manage]: the opt-in MCP management tools and the folders loads may come from."""

    model_config = SECTION

    enabled: bool = False
    sources: list[PathText] = []
    install_to: Literal["workspace", "user"] = "workspace"
    registries: list[Annotated[str, Field(min_length=1, max_length=300)]] = []


class ConfigFile(BaseModel):
    """A whole wasmext.toml: every section and its rules."""

    model_config = SECTION

    host: HostTable = HostTable()
    plugins: PluginsTable = PluginsTable()
    limits: TopLimitsTable = TopLimitsTable()
    grants: dict[PluginId, GrantTable] = {}
    plugin: dict[PluginId, PluginTable] = {}
    state: StateTable = StateTable()
    mcp: McpSection = McpSection()
    trust: TrustTable = TrustTable()
    extensions: ExtensionsSection = ExtensionsSection()
    llm: LlmSection = LlmSection()
    http: HttpSection = HttpSection()
    nats: NatsTable = NatsTable()
    tracing: TracingSection = TracingSection()
    manage: ManageTable = ManageTable()
    fs: FsSection = FsSection()
    remote: dict[PluginId, RemotePluginSpec] = {}
    agents: dict[AgentName, AgentTable] = {}


# -- from the validated file to the HostConfig the host takes ----------------------------


def host_config(doc: ConfigFile, path: Path | None) -> HostConfig:
    """The HostConfig a validated file makes (relative paths from the file's folder)."""
    base = path.parent if path else Path.cwd()

    def where(raw: str) -> Path:
        p = Path(os.path.expanduser(raw))
        return p if p.is_absolute() else base / p

    host, plugins, state = doc.host, doc.plugins, doc.state
    limits = Limits().replace(**doc.limits.given())
    if host.default_timeout_ms is not None and doc.limits.timeout_ms is None:
        limits = limits.replace(timeout_ms=host.default_timeout_ms)
    cap = Limits().replace(**doc.limits.cap.given()) if doc.limits.cap is not None else None
    return HostConfig(
        path=path, data_dir=where(host.data_dir), hooks=host.hooks,
        auto_enable=host.auto_enable, default_timeout_ms=host.default_timeout_ms,
        ticks=TickPolicy(min_interval_ms=host.tick_min_interval_ms,
                         max_ticking_plugins=host.max_ticking_plugins),
        gc_freeze=host.gc_freeze, instance_pool=host.instance_pool,
        user_dir=where(plugins.user_dir) if plugins.user_dir is not None else None,
        workspace_dir=where(plugins.workspace_dir) if plugins.workspace_dir is not None
        else None,
        user_extensions=plugins.user_extensions, entry_points=plugins.entry_points,
        enabled=frozenset(plugins.enabled), disabled=frozenset(plugins.disabled),
        limits=limits, cap=cap,
        grants={pid: Grant(g.digest, frozenset(g.capabilities), g.manifest)
                for pid, g in doc.grants.items()},
        overrides={pid: PluginOverrides(o.settings, o.limits.given(), o.failure, o.priority,
                                        frozenset(o.env), o.trust_tool_hints)
                   for pid, o in doc.plugin.items()},
        state_backend=state.backend, state_url=state.url, state_limits=state.limits(),
        state_bucket=state.bucket or "wasmext_state", state_replicas=state.replicas or 1,
        mcp_enabled=doc.mcp.enabled, mcp_servers=doc.mcp.configs(),
        require_signature=doc.trust.require_signature, trusted_keys=tuple(doc.trust.keys),
        extensions={ext_id: spec.remote(ext_id)
                    for ext_id, spec in doc.extensions.entries().items()}
        if doc.extensions.enabled else {},
        extensions_enabled=doc.extensions.enabled,
        extension_dirs=tuple(where(d) for d in doc.extensions.directories),
        llm=doc.llm.settings(), http=doc.http.settings(), nats=doc.nats.auth(base),
        tracing=doc.tracing.settings(), fs=doc.fs.quota(),
        manage=ManageSettings(doc.manage.enabled, tuple(where(d) for d in doc.manage.sources),
                              doc.manage.install_to, tuple(doc.manage.registries)),
        remote={pid: spec.entry(pid) for pid, spec in doc.remote.items()}
        if doc.extensions.enabled else {},
        agents={name: table.spec(name) for name, table in doc.agents.items()})
