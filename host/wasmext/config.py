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

Every section is a pydantic model (`ConfigFile` in `wasmext.configfile`, imported on the
first parse, and the section models it holds, some kept beside what they configure:
`McpSection`, `LlmSection`, `HttpSection`, `TracingSection`, `NatsTable`, `ExtensionSpec`,
`AgentTable`; `ExtensionsSection` holds the switch, the folders and the entries); what
they decide is `HostConfig` (`wasmext.hostconfig`), plain dataclasses.
Types, value rules and the rules between fields all live there, so a bad file is one
ConfigError naming every problem with its field path
(`field 'limits.fuel_per_call': must be > 0; field 'mcp.servers.x.url': ...`), cleaned
and capped as `wasmext.validation` says.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext._toml import ConfigTextError, parse_text, read_capped
from wasmext.cluster.natsauth import NatsAuth
from wasmext.errors import ConfigError, UnsafeFile
from wasmext.files import atomic_write, locked, read_regular
from wasmext.hostconfig import HOST_CREDENTIAL_ENV, HostConfig, ManageSettings, PluginOverrides
from wasmext.lifecycle.approvals import Grant
from wasmext.mcp.envsubst import env_refs

if TYPE_CHECKING:
    from wasmext.configfile import ConfigFile
    from wasmext.mcp.config import McpServerConfig
    from wasmext.state import StateStore

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


def __getattr__(name: str) -> Any:
    """The file's schema (`ConfigFile`, its tables) and `McpServerConfig`, on first use:
    they bring pydantic, which a host run without a config file never needs."""
    if name == "McpServerConfig":
        from wasmext.mcp.config import McpServerConfig

        return McpServerConfig
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import wasmext.configfile

    try:
        return getattr(wasmext.configfile, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


MAX_ENABLE_STATE_BYTES = 4 * 2**20


def parse_config(data: Any, path: Path | None = None) -> HostConfig:
    """A decoded wasmext.toml as a HostConfig, or one ConfigError naming every problem."""
    from wasmext.configfile import ConfigFile, host_config
    from wasmext.validation import check

    config = host_config(check(ConfigFile, data, path), path)
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
