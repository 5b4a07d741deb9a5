"""wasmext.toml: the host's configuration, a pydantic model per section, every problem at once.

    [host]
    data_dir = ".wasmext"        # enable/disable state lives here
    hooks = true                 # global switch: false runs no plugin hook
    auto_enable = true           # plugins seen for the first time start enabled
    default_timeout_ms = 1000
    tick_min_interval_ms = 1000  # no plugin's on_tick runs more often (services.ticks)
    max_ticking_plugins = 64
    gc_freeze = true             # `wasmext` commands: wasmext.tune_gc() once plugins are loaded
    instance_pool = 10_000       # plugin instances alive at once (0: no pool; sandbox.engine)

    [plugins]
    user_dir = "~/.config/wasmext/plugins"   # runs before the workspace
    workspace_dir = "plugins"
    user_extensions = true       # false: the user_dir is not loaded, user copies refused
    entry_points = false         # true: also installed packages' wasmext.plugins entry points
    enabled = ["pii-mask"]       # initial choices; `wasmext enable/disable` persist
    disabled = []

    [limits]                     # defaults for every plugin
    fuel_per_call = 50_000_000
    [limits.cap]                 # host policy: no plugin gets more
    memory_bytes = 268_435_456

    [grants.pii-mask]            # capabilities, keyed to the module's digest
    digest = "sha256:..."
    manifest = "sha256:..."      # optional: and to plugin.toml's (`wasmext inspect`)
    capabilities = ["state"]

    [state]                      # plugin state: sqlite (default), memory, redis or jetstream
    backend = "sqlite"           # data_dir/state.db; redis needs url = "redis://..."
    ttl_seconds = 3600           # and any other StateLimits field
    # backend = "jetstream"      # a NATS KV bucket; url defaults to [nats] url, and the
    # bucket = "wasmext_state"   # connection authenticates as [nats] says
    # replicas = 1               # the bucket's replicas when this host creates it

    [mcp]                        # MCP servers whose tools join the registry
    enabled = true               # the global switch
    connect_timeout_s = 10       # every server's, unless its table says otherwise
    [mcp.servers.calc]
    transport = "stdio"          # stdio, sse or http (streamable HTTP; needs url)
    command = "python"
    args = ["calc_server.py"]
    env = { TOKEN = "${CALC_TOKEN}" }   # ${VAR}: missing ones warn and read as ""
    inherit_env = true           # the host's environment too (false: a minimal one)
    call_timeout_s = 30

    [fs]                         # every folder grant's bounds (fs:PATH[:ro|rw] grants)
    max_bytes = 268_435_456      # bytes in each granted folder
    max_files = 10_000           # files and folders in each granted folder
    max_io_bytes = 67_108_864    # bytes read and written by one call

    [trust]                      # signed bundles (docs/lifecycle.md)
    require_signature = false    # true: only folders installed from a bundle signed
    keys = ["ed25519:..."]       # by one of these keys load (and install)

    [manage]                     # `wasmext mcp serve` management tools (docs/mcp-manage.md)
    enabled = false              # true serves them (as `wasmext mcp serve --manage` does)
    sources = ["incoming"]       # the only folders a client may load plugins from
    registries = ["127.0.0.1:5000/team/*"]   # the only oci:// REGISTRY/NAME it may pull
    install_to = "workspace"     # where a load installs: [plugins] workspace_dir or user_dir

    [extensions]                 # the plugins ("extensions" in the seeds) as a whole
    enabled = true               # false: no plugin folder is read, no remote stage known
    directories = ["more-plugins"]   # plugin folders after user_dir and workspace_dir

    [extensions.pii_guard]       # a remote extension (docs/cluster.md)
    type = "validator"
    subject = "wasmext.ext.validate.pii_guard.v1"
    timeout_ms = 100

    [remote.agent-guard]         # a whole plugin served by workers (docs/cluster.md)
    subject = "wasmext.plugin.agent-guard.v0"
    timeout_ms = 5000

    [nats]                       # credentials and TLS for worker and callers (docs/cluster.md)
    user = "worker"
    password_file = "secrets/nats-worker"

    [llm]                        # the model behind llm.complete (services.llm.config)
    url = "http://127.0.0.1:8000/v1"
    model = "small-model"

    [agents.reviewer]            # agents.request/send targets (services.agent_config)
    target = "mytools.review:review"   # the operator's Python, imported at start
    factory = false              # true: target() makes a session per call (.ask(input))
    [agents.summarizer]          # or a model agent: the [llm] model under this prompt
    system = "Summarise the text you are given."

    [tracing]                    # OpenTelemetry spans (observe.tracing; wasmext[otel])
    enabled = true               # off by default
    exporter = "otlp-http"       # otlp-http, otlp-grpc or console
    endpoint = "http://127.0.0.1:4318/v1/traces"

    [plugin.normalize-text]      # per-plugin settings, limits, failure policy, priority
    settings = { lowercase = true }
    priority = 40
    limits = { timeout_ms = 200 }
    failure = "closed"
    env = ["NORMALIZE_LOCALE"]   # the only environment variables its settings (and its
                                 # MCP servers' ${VAR}s) may read; never a host credential
    trust_tool_hints = false     # true: `mcp serve` passes on its tools' readOnlyHint=true
                                 # and other hints claiming safety (docs/mcp.md)

Relative paths are relative to the file's folder.

Every section is a pydantic model (`ConfigFile` and the section models it holds, some
kept beside what they configure: `McpSection`, `LlmSection`, `HttpSection`,
`TracingSection`, `ExtensionSpec`, `AgentTable`; `ExtensionsSection` holds the switch,
the folders and the entries).
Types, value rules and the rules between fields all live there, so a bad file is one
ConfigError naming every problem with its field path
(`field 'limits.fuel_per_call': must be > 0; field 'mcp.servers.x.url': ...`), cleaned
and capped as `wasmext.validation` says.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
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

from wasmext._toml import ConfigTextError, parse_text, read_capped
from wasmext.capabilities import capability_problem
from wasmext.cluster.natsauth import ENV_PREFIX, NatsAuth, NatsTable
from wasmext.cluster.registry import (
    ExtensionId,
    ExtensionSpec,
    RemoteExtension,
    RemotePluginEntry,
    RemotePluginSpec,
)
from wasmext.discovery import PACKAGES
from wasmext.errors import ConfigError, UnsafeFile
from wasmext.files import atomic_write, locked, read_regular
from wasmext.lifecycle.approvals import Grant
from wasmext.lifecycle.signing import is_public_key
from wasmext.manifest import ID_RE
from wasmext.mcp.config import McpSection, McpServerConfig
from wasmext.mcp.envsubst import env_refs
from wasmext.observe.tracing import TracingSettings
from wasmext.observe.tracing_config import TracingSection
from wasmext.sandbox.engine import MAX_INSTANCE_POOL, EngineConfig
from wasmext.sandbox.fsgrants import FsQuota
from wasmext.sandbox.limits import WASM_PAGE, Limits
from wasmext.services.agent_config import AgentName, AgentSpec, AgentTable
from wasmext.services.http.config import HttpSection, HttpSettings
from wasmext.services.llm.config import LlmSection
from wasmext.services.llm.service import LlmSettings
from wasmext.services.ticks import TickPolicy
from wasmext.state import StateLimits, StateStore
from wasmext.validation import SECTION, Count, Nonnegative, check, problem

__all__ = [
    "HOST_CREDENTIAL_ENV",
    "ConfigFile",
    "EnableState",
    "Grant",
    "HostConfig",
    "ManageSettings",
    "McpServerConfig",
    "PluginOverrides",
    "load_config",
    "open_store",
    "parse_config",
]


MAX_ENABLE_STATE_BYTES = 4 * 2**20
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


# -- the rules: one pydantic model per section -------------------------------------------

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


def _host_config(doc: ConfigFile, path: Path | None) -> HostConfig:
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


def parse_config(data: Any, path: Path | None = None) -> HostConfig:
    """A decoded wasmext.toml as a HostConfig, or one ConfigError naming every problem."""
    config = _host_config(check(ConfigFile, data, path), path)
    raw = data if isinstance(data, Mapping) else {}
    credentials = HOST_CREDENTIAL_ENV | frozenset(
        {config.llm.api_key_env} | env_refs(raw.get("mcp", {})) | env_refs(raw.get("llm", {}))
        | env_refs(raw.get("state", {})) | env_refs(raw.get("tracing", {})))
    for pid, over in sorted(config.overrides.items()):
        for var in sorted(over.env & credentials):
            raise ConfigError(f"{path or 'config'}: field 'plugin.{pid}.env': environment "
                              f"variable {var} is a credential of the host itself; no plugin "
                              "may read it")
    return dataclasses.replace(config, credential_env=credentials)


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
    """Which plugins are enabled, persisted in data_dir/plugins.json (atomically).

    The CLI and every running host write it: a change locks `plugins.json.lock`,
    reads the file again and changes only its own entry, so no writer undoes
    another's change. A plugins.json that is a FIFO, a device or over its cap is
    refused (ConfigError), never waited on."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self.path = config.data_dir / "plugins.json"
        self._choices = self._read()

    def _read(self) -> dict[str, bool]:
        try:
            raw = json.loads(read_regular(self.path, MAX_ENABLE_STATE_BYTES))
        except FileNotFoundError:
            return {}
        except UnsafeFile as exc:
            raise ConfigError(f"{self.path}: cannot read: {exc.strerror}") from exc
        except (OSError, ValueError, RecursionError):
            return {}  # an unreadable choice file: the config's defaults decide
        choices = raw.get("enabled", {}) if isinstance(raw, dict) else {}
        if not isinstance(choices, dict):
            return {}
        return {k: v for k, v in choices.items() if isinstance(k, str) and isinstance(v, bool)}

    def is_enabled(self, plugin_id: str) -> bool:
        """The operator's choice, else the config's lists, else auto_enable."""
        if plugin_id in self._choices:
            return self._choices[plugin_id]
        if plugin_id in self.config.disabled:
            return False
        if plugin_id in self.config.enabled:
            return True
        return self.config.auto_enable

    def set(self, plugin_id: str, enabled: bool) -> None:
        """Record one plugin's choice, merged into what other processes recorded."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with locked(self.path.with_name(self.path.name + ".lock")):
                choices = self._read()
                choices[plugin_id] = enabled
                atomic_write(self.path, json.dumps({"enabled": choices}, indent=1,
                                                   sort_keys=True))
        except TimeoutError as exc:
            raise ConfigError(f"cannot record the choice: {exc}") from exc
        except OSError as exc:  # UnsafeFile too: a lock or state file that is no file
            raise ConfigError(f"{exc.filename or self.path}: cannot record the choice: "
                              f"{exc.strerror}") from exc
        self._choices = choices


@contextlib.contextmanager
def _extra_needed(extra: str, modules: tuple[str, ...]) -> Iterator[None]:
    """A state backend's client library missing: a ConfigError naming the extra that
    installs it, not a ModuleNotFoundError from deep inside the first session."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in modules:
            raise
        raise ConfigError(f"[state] backend needs the {extra} extra (module {exc.name} is "
                          f"not installed): pip install 'wasmext[{extra}]'") from None


def open_store(config: HostConfig) -> StateStore:
    """The store a host config asks for."""
    from wasmext.state import MemoryStore, SQLiteStore, StateLimits

    limits = StateLimits().replace(**config.state_limits)
    if config.state_backend == "memory":
        return MemoryStore(limits)
    if config.state_backend == "redis":
        with _extra_needed("redis", ("redis",)):
            from wasmext.state.redis.store import RedisStore

        return RedisStore(limits=limits, url=config.state_url)
    if config.state_backend == "jetstream":
        with _extra_needed("nats", ("nats",)):
            import nats  # noqa: F401  (the store imports it only when it first connects)

            from wasmext.state.jetstream.store import JetStreamStore

        auth = config.nats.with_env()  # the [nats] credentials, as the cluster's links use
        try:
            options = auth.options()
        except (OSError, ValueError) as exc:  # a TLS file that cannot be read or used
            raise ConfigError(f"[nats] TLS for the jetstream state backend: {exc}") from None
        url = config.state_url or auth.url
        if url is None:
            raise ConfigError("the jetstream state backend needs [state] url, [nats] url or"
                              " WASMEXT_NATS_URL")
        return JetStreamStore(url, limits, bucket=config.state_bucket,
                              replicas=config.state_replicas, options=options,
                              secrets=auth.secrets() + NatsAuth(url=url).secrets())
    return SQLiteStore.in_data_dir(config.data_dir, limits)
