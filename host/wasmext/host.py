"""Host: many plugins, one ordering rule, and the failure policy of each.

    with Host.from_config("wasmext.toml") as host:
        with host.session() as s:
            text = s.on_plain_text("hello").value

The hook kinds live in `wasmext.hooks.*`; this module owns what they share:
loading (discovery, enable state, grants keyed to digests), the order of the
entries of a hook, and sessions. `Host.call`, which runs one plugin under its
failure policy, is `wasmext.plugin_calls`; the plugins' own MCP servers are
`wasmext.plugin_servers`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext.config import EnableState, HostConfig, load_config, open_store
from wasmext.discovery import as_load_error, discover
from wasmext.errors import ConfigError, LoadError, WasmextError
from wasmext.hooks.activations import Activations
from wasmext.hooks.extensions import declared
from wasmext.hooks.middleware import install_next
from wasmext.hooks.ordering import Entry, constraint_cycle, order_entries
from wasmext.hooks.registration import registration_problems
from wasmext.ids import random_hex
from wasmext.lifecycle import reload
from wasmext.lifecycle.approvals import Subject, subject_of
from wasmext.lifecycle.approvals import granted as approved_grants
from wasmext.manifest import Manifest, load_folder
from wasmext.mcp.client.plugin_ops import install as install_mcp_ops
from wasmext.observe import tracing
from wasmext.operator_settings import SettingsFile, settings_view
from wasmext.plugin_calls import PluginCalls
from wasmext.plugin_servers import PluginServers
from wasmext.runtime import Runtime, allowed_environ
from wasmext.sandbox.backends.extism import ExtismPlugin
from wasmext.sandbox.engine import EngineConfig
from wasmext.sandbox.faults import detached
from wasmext.sandbox.fsgrants import reaching
from wasmext.sandbox.limits import effective_limits
from wasmext.sandbox.plugin import Plugin
from wasmext.services.agents import AgentRegistry
from wasmext.services.events import Observer
from wasmext.services.hostview import FaultRecord, LoadedPlugin
from wasmext.services.llm.ledger import DayLedger
from wasmext.services.llm.service import Completer, LlmService
from wasmext.services.state import install_state
from wasmext.services.tools import ToolRegistry
from wasmext.session import Session
from wasmext.state import StateStore
from wasmext.text import clean

if TYPE_CHECKING:
    from wasmext.mcp.client.connections import McpClients

__all__ = ["FaultRecord", "Host", "LoadedPlugin"]

log = logging.getLogger("wasmext.host")

CLOSE_FLUSH_S = 5.0  # how long close() waits for queued events to reach their subscribers


_tracing_install = tracing.install  # `tracing` is also Host.__init__'s parameter


class Host(PluginServers, PluginCalls):
    """Loads plugins, orders their hooks and calls them under their failure policy.

    Thread-safe: concurrent sessions each borrow their own plugin instances.
    """

    def __init__(self, config: HostConfig | None = None, *, runtime: Runtime | None = None,
                 plugin_dirs: Iterable[tuple[str, Path]] | None = None,
                 llm: Completer | None = None,
                 tracing: tracing.TracingSettings | tracing.Tracing | None = None) -> None:
        self.config = config or HostConfig()
        # The config's [agents]: a target that cannot be imported fails the start (one
        # ConfigError naming them all) before anything is started that would need closing.
        declared_agents: dict[str, tuple[Any, bool]] = {}
        if self.config.agents:  # their schema and loader come with them (pydantic)
            from wasmext.services.agent_config import load_agents

            declared_agents = load_agents(self.config.agents, lambda: self.llm,
                                          self.config.path)
        # Spans (observe.tracing): an embedder's choice, else [tracing]; off by default.
        self.tracing = _tracing_install(tracing if tracing is not None
                                        else self.config.tracing)
        self.runtime = runtime or Runtime(
            defaults=self.config.limits, policy=self.config.cap,
            engine=EngineConfig(instance_pool=self.config.instance_pool))
        self.enable_state = EnableState(self.config)
        self.settings_file = SettingsFile(self.config.data_dir)  # `wasmext config set`
        self.plugins: dict[str, LoadedPlugin] = {}
        # Plugins found but not loaded because the operator disabled them (`wasmext list`).
        self.disabled: dict[str, Manifest] = {}
        self.load_errors: list[WasmextError] = []
        self.faults: list[FaultRecord] = []
        self._order_cache: dict[str, list[Entry]] = {}
        self._lock = threading.RLock()
        install_next(self.runtime.services)
        if runtime is None:  # [fs]: folder grants' bounds (an embedder's runtime keeps its own)
            self.runtime.services.fs_quota = self.config.fs
        self.observe = Observer(self)
        self.observe.ticks.policy = self.config.ticks
        self.observe.install(self.runtime.services)
        self.tools = ToolRegistry(self)
        self.tools.plugin_session = self._plugin_session
        self.tools.install(self.runtime.services)
        self.http = self.config.http.service()  # http.fetch ([http]; inject_header)
        self.http.install(self.runtime.services)
        # llm.complete: the `llm` callable, else the [llm] endpoint (services.llm.service)
        if llm is None and self.config.llm.url:  # a client only for an [llm] endpoint
            from wasmext.services.llm.config import completer_from

            llm = completer_from(self.config.llm)
        self.llm = LlmService(self.observe.metrics, self.config.llm, llm,
                              DayLedger(self.state_store))
        self.llm.install(self.runtime.services)
        self.agents = AgentRegistry()  # agents.request/send: `host.agents.register(...)`
        for name, (target, factory) in declared_agents.items():
            self.agents.register(name, target, factory=factory)
        # Users' output-extension activations and the turns' saved results (hooks.activations)
        self.extensions = Activations(self.state_store, lambda name: declared(self, name))
        self.agents.install(self.runtime.services)
        install_mcp_ops(self.runtime.services, lambda: self.mcp)
        for server in self.config.mcp_servers:  # configured servers own their names first
            try:
                self.tools.claim(server.name, f"mcp:{server.name}")
            except ConfigError as err:
                self.load_errors.append(err)
        self._state: StateStore | None = None
        install_state(self.runtime.services, self.state_store, self.observe.metrics)
        self.mcp: McpClients | None = None
        dirs = list(plugin_dirs) if plugin_dirs is not None else self.config.plugin_dirs()
        if not self.config.extensions_enabled:  # [extensions] enabled = false: no folder
            dirs = []
        self.plugin_dirs = dirs  # what rescan() looks at again
        for found in discover(dirs):
            if found.error is not None:
                self.load_errors.append(found.error)
            elif found.manifest is not None:
                self.load_folder(found.folder, found.manifest, found.source)

    @classmethod
    def from_config(cls, path: str | Path) -> Host:
        """A host from a `wasmext.toml` file (see `load_config`)."""
        return cls(load_config(Path(path)))

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Host:
        return self

    async def __aexit__(self, *exc: object) -> None:
        import asyncio  # here: a host used without a loop never imports asyncio

        await asyncio.to_thread(self.close)  # closing joins threads: not on the loop

    def tool(self, fn: Any = None, *, name: str | None = None,
             description: str | None = None) -> Any:
        """`@host.tool` or `@host.tool(name=..., description=...)`: a Python function as
        a host tool, its schema from the type hints (`services.pytools`)."""
        from wasmext.services.pytools import host_tool  # pydantic, with the first tool

        return host_tool(self, fn, name=name, description=description)

    def state_store(self) -> StateStore:
        """The plugin state store, opened on first use (see the [state] config)."""
        # Once open, without the host's lock: every call's first state op asks, and a
        # forked child may never get the lock (a parent thread held it at the fork).
        state = self._state
        if state is not None:
            return state
        with self._lock:
            if self._state is None:
                self._state = open_store(self.config)
            return self._state

    def close(self) -> None:
        """Stop MCP clients, deliver the events still queued (bounded), unsubscribe and
        unload every plugin, close the state store and the runtime."""
        if self.mcp is not None:
            self.mcp.stop()
            self.mcp = None
        # A turn's last events (turn.completed, ...) may still be queued: they reach
        # their subscribers while those are subscribed, then the plugins go.
        # (Closed from inside a subscriber, it cannot wait for itself.)
        with contextlib.suppress(RuntimeError):
            self.observe.bus.flush(CLOSE_FLUSH_S)
        for pid in list(self.plugins):
            self.observe.unloaded(pid)
        self.observe.close()
        self.agents.close()
        if self._state is not None:
            self._state.close()
        self.runtime.close()
        self.plugins.clear()
        if self.tracing is not None:  # the spans still batched are sent first
            tracing.deactivate(self.tracing)

    # -- loading -------------------------------------------------------------------

    def load_folder(self, folder: Path, manifest: Manifest, source: str,
                    replace: bool = False) -> None:
        """Load a discovered plugin folder unless disabled; a failure joins `load_errors`."""
        if not self.enable_state.is_enabled(manifest.id):
            log.info("plugin %s is disabled", manifest.id)
            self.disabled[manifest.id] = manifest
            return
        self.disabled.pop(manifest.id, None)
        try:
            signed = None
            if self.config.require_signature:  # before any of its code is compiled
                from wasmext.lifecycle.bundle import verify_folder

                signed = verify_folder(folder, manifest, self.config.trusted_keys)
            self.add(folder, source_kind=source, manifest=manifest, replace=replace,
                     digest=signed[0] if signed else None,
                     module_bytes=signed[1] if signed else None)
        except Exception as exc:  # one plugin never stops the others
            err = as_load_error(folder, exc)
            if err.plugin_id is None:
                err.plugin_id = manifest.id
            log.error("plugin %s not loaded: %s", manifest.id, err.describe())
            # Kept (up to a thousand over reloads): without the frames of the load, which
            # held the plugin, its compiled module and its bytes.
            self.load_errors.append(detached(err))

    def add(self, source: str | Path | bytes | Plugin | ExtismPlugin, *,
             source_kind: str = "explicit", manifest: Manifest | None = None,
             plugin_id: str | None = None, settings: Mapping[str, Any] | None = None,
             limits: Mapping[str, int] | None = None,
             grants: Iterable[str] = (), failure: str | None = None,
             priority: int | None = None, replace: bool = False,
             digest: str | None = None,
             module_bytes: bytes | None = None) -> Plugin | ExtismPlugin:
        """Load a plugin (folder, .wasm/.wat path, bytes) or adopt a loaded Plugin.

        Config overrides (settings, limits, failure, env) apply by plugin id; grants
        from the config and recorded approvals apply only while the module's
        digest, the manifest's and those of the files it makes the host run match
        (`lifecycle.approvals.Subject`). A folder's settings and MCP servers read
        only the environment variables `[plugin.ID] env` names, never a host
        credential. `replace` swaps a loaded plugin of the same id for this
        one (a reload): calls already running finish on the old one. `digest`
        ("sha256:...") refuses a module whose bytes are not the ones expected;
        `module_bytes` are a folder's verified module bytes, compiled as they are.
        """
        plugin: Plugin | ExtismPlugin
        executed: Mapping[str, str] = {}
        if isinstance(source, (Plugin, ExtismPlugin)):
            plugin = source
        else:
            path = Path(source) if isinstance(source, (str, Path)) else None
            if manifest is None and path is not None and path.is_dir():
                manifest = load_folder(path)
            pid = plugin_id or (manifest.id if manifest else None)
            over = self.config.overrides.get(pid or "")
            allowed = over.env if over else frozenset()
            denied = self.config.credential_env | {self.config.llm.api_key_env}
            if manifest is not None:  # its MCP servers' ${VAR}s: the allowed ones only
                manifest = manifest.resolve_mcp(allowed_environ(manifest, allowed,
                                                                denied=denied))
            operator = self.settings_file.of(pid) if pid and manifest is not None else {}
            merged_settings = {**(over.settings if over else {}), **operator,
                               **(settings or {})}
            merged_limits = {**(over.limits if over else {}), **(limits or {})}
            if priority is None and over is not None:
                priority = over.priority
            # The operator's [limits.cap] holds also over a runtime the embedder made.
            granted = effective_limits(self.runtime.defaults, None, merged_limits,
                                       self.config.cap)
            plugin = self.runtime.load(
                source, plugin_id=pid, settings=merged_settings, limits=granted, grants=grants,
                priority=priority, manifest=manifest if path is not None and path.is_dir()
                else None, env=allowed, denied_env=denied,
                module_bytes=module_bytes,
                # A setting the operator injects into requests stays sensitive even when
                # the manifest says otherwise: else config.get would hand it over.
                sensitive={inj[3] for inj in self.config.http.inject if inj[0] == pid})
            if digest is not None and digest != f"sha256:{plugin.module.info.digest}":
                raise LoadError(f"plugin {plugin.id}: its module is not the one expected "
                                f"({digest[:19]}...)", plugin_id=plugin.id)
            subject = subject_of(f"sha256:{plugin.module.info.digest}", manifest)
            executed = subject.files
            plugin.set_grants(plugin.grants | approved_grants(  # [grants.ID], approvals
                plugin.id, subject, self.config.data_dir, self.config.grants.get(plugin.id)))
        self._withhold_host_folders(plugin)
        problems = registration_problems(plugin.registration.extra)
        if problems:  # said now, naming the field, not dropped at every prompt
            self._drop_refused(plugin)
            raise LoadError(f"plugin {plugin.id}: registration " + "; ".join(
                f"field '{f}': {why}" for f, why in problems), plugin_id=plugin.id)
        over = self.config.overrides.get(plugin.id)
        policy = failure or (over.failure if over and over.failure else None) or \
            (manifest.failure if manifest else "open")
        if isinstance(plugin, Plugin):
            plugin.meter = True
        with self._lock:
            old = self.plugins.get(plugin.id)
            if old is not None and old.plugin is not plugin and not replace:
                raise ConfigError(f"plugin id {plugin.id!r} is already loaded",
                                  plugin_id=plugin.id)
            if manifest is not None and (manifest.before or manifest.after):
                constraints = {other.id: (other.manifest.before, other.manifest.after)
                               for other in self.plugins.values()
                               if other.manifest is not None and other.id != plugin.id}
                constraints[plugin.id] = (manifest.before, manifest.after)
                cycle = constraint_cycle(constraints)
                if cycle is not None:  # else every hook call of the host would fail
                    self._drop_refused(plugin)
                    raise LoadError(f"plugin {plugin.id} not loaded: its manifest's "
                                    "before/after would form a cycle among: "
                                    f"{', '.join(cycle)}", plugin_id=plugin.id)
            try:  # its tools are `{id}__*`: nobody else may own that prefix
                self.tools.claim(plugin.id, f"plugin:{plugin.id}")
            except ConfigError as err:
                raise ConfigError(f"plugin {plugin.id} not loaded: its tools would be named "
                                  f"{plugin.id}__*, and {err.message}",
                                  plugin_id=plugin.id) from err
            lp = LoadedPlugin(plugin, source_kind,
                              old.load_index if old is not None else len(self.plugins),
                              manifest, policy, executed=executed)
            self.plugins[plugin.id] = lp  # one assignment: a call sees old or new, never half
            self._order_cache.clear()
        if old is not None and old.plugin is not plugin:
            self.observe.unloaded(plugin.id)
        self.observe.loaded(lp)
        for problem in self.tools.register_plugin(lp):
            log.error("%s", problem)
            self.load_errors.append(ConfigError(problem, plugin_id=lp.id))
        if "http" in plugin.grants or ("llm" in plugin.grants and self.llm.settings.url):
            # httpx comes with the first plugin that may use it (services.http.transport),
            # imported and its TLS context built here, not inside that plugin's first call.
            from wasmext.services.http.transport import tls_context

            tls_context()
        return plugin

    def approved_now(self, lp: LoadedPlugin) -> frozenset[str]:
        """What the config's [grants.ID] and the recorded approvals grant the loaded
        plugin now, for the module and manifest it was loaded from."""
        module = f"sha256:{lp.plugin.module.info.digest}"
        subject = Subject(module, lp.manifest.source_digest, dict(lp.executed)) \
            if lp.manifest is not None else Subject(module)
        return approved_grants(lp.id, subject, self.config.data_dir,
                               self.config.grants.get(lp.id))

    def settings_of(self, plugin_id: str) -> list[dict[str, Any]]:
        """A loaded plugin's settings as an operator may see them: each value (sensitive
        ones masked) and its source (`operator_settings.settings_view`)."""
        lp = self.plugins[plugin_id]
        over = self.config.overrides.get(plugin_id)
        return settings_view(lp.manifest, lp.plugin.settings, lp.plugin.sensitive,
                             over.settings if over else {},
                             self.settings_file.of(plugin_id) if lp.manifest else {})

    def unknown_guided_tools(self) -> list[ConfigError]:
        """One error per tool a loaded plugin's tool_guidance names that the registry
        does not hold, naming the plugin and the field. Tools join the registry after
        load (MCP servers, the application's), so a driver asks once its catalog is
        complete (`wasmext.agent.Agent` does, into `load_errors`)."""
        known = set(self.tools.tools)
        out = []
        for pid in sorted(self.plugins):
            raw = self.plugins[pid].plugin.registration.extra.get("tool_guidance")
            for key, names in sorted(raw.items()) if isinstance(raw, dict) else ():
                for i, name in enumerate(names if isinstance(names, list) else []):
                    if isinstance(name, str) and name not in known:
                        out.append(ConfigError(
                            f"plugin {pid}: field 'tool_guidance.{key}[{i}]': no tool "
                            f"{clean(name, 64)!r} in the registry", plugin_id=pid,
                            problems=((f"tool_guidance.{key}[{i}]", "unknown tool"),)))
        return out

    def _drop_refused(self, plugin: Plugin | ExtismPlugin) -> None:
        """Forget a plugin refused at load in the runtime too (a replaced one stays)."""
        if self.runtime.plugins.get(plugin.id) is plugin and plugin.id not in self.plugins:
            del self.runtime.plugins[plugin.id]

    def _withhold_host_folders(self, plugin: Plugin | ExtismPlugin) -> None:
        """Withhold folder grants that reach the data dir or a plugin folder (every
        plugin's state, approvals.json, MCP tokens, other plugins' files), whoever gave
        them: one load error and warning say which."""
        owned = [self.config.data_dir, *(folder for _, folder in self.plugin_dirs)]
        withheld = reaching(plugin.grants, owned)
        if not withheld:
            return
        plugin.set_grants(plugin.grants - withheld)
        err = ConfigError(f"plugin {plugin.id}: folder grant(s) {', '.join(sorted(withheld))} "
                          "withheld: they reach the host's data dir or plugin folders",
                          plugin_id=plugin.id)
        self.load_errors.append(err)
        log.warning("%s", clean(err.message, 600), extra={"plugin_id": plugin.id})

    def ordered(self, hook: str) -> list[Entry]:
        """The entries of `hook` in call order (cached until the plugin set changes)."""
        cached = self._order_cache.get(hook)  # every hook call asks: no lock for a hit
        if cached is not None:
            return cached
        with self._lock:
            cached = self._order_cache.get(hook)
            if cached is not None:
                return cached
            entries = []
            constraints = {}
            for lp in self.plugins.values():
                if lp.manifest is not None:
                    constraints[lp.id] = (lp.manifest.before, lp.manifest.after)
                for i, spec in enumerate(lp.plugin.registration.hooks):
                    if spec.hook == hook:
                        entries.append(Entry(lp.id, hook, spec.priority, lp.source,
                                             lp.load_index, i, spec.pattern))
            result = order_entries(entries, constraints)
            self._order_cache[hook] = result
            return result

    def order_table(self) -> dict[str, list[Entry]]:
        """Every registered hook with its entries in call order."""
        hooks = sorted({h.hook for lp in self.plugins.values()
                        for h in lp.plugin.registration.hooks})
        return {hook: self.ordered(hook) for hook in hooks}

    def enable(self, plugin_id: str) -> None:
        """Enable a plugin (persisted); it loads at the next start or rescan."""
        self.enable_state.set(plugin_id, True)

    def disable(self, plugin_id: str, *, purge_state: bool = False) -> None:
        """Disable a plugin (persisted) and unload it now (its MCP servers stop);
        `purge_state` also deletes its state in every scope (see `unload`)."""
        self.enable_state.set(plugin_id, False)
        lp = self.plugins.get(plugin_id)
        if lp is not None and lp.manifest is not None:
            self.disabled[plugin_id] = lp.manifest
        self.unload(plugin_id, purge_state=purge_state)

    def unload(self, plugin_id: str, *, purge_state: bool = False) -> bool:
        """Unload a plugin now: hooks, tools, subscriptions and its own MCP servers go;
        True if it was loaded. Its state stays (a reload finds it again) unless
        `purge_state`: then every scope of it is deleted, loaded or not, and logged."""
        unloaded = self._unload(plugin_id)
        if purge_state:  # after the unload: no new call of it writes again
            purged = self.state_store().drop_plugin(plugin_id)
            log.info("plugin %s: %d state entries purged", plugin_id, purged,
                     extra={"plugin_id": plugin_id, "event": "state.purge",
                            "entries": purged})
        return unloaded

    def _unload(self, plugin_id: str) -> bool:
        with self._lock:
            lp = self.plugins.get(plugin_id)
            servers = self._owned_servers(lp) if lp is not None else []
            self.plugins.pop(plugin_id, None)
            if lp is not None:
                lp.plugin.close()  # idle instances go; running calls finish on theirs
                if self.runtime.plugins.get(plugin_id) is lp.plugin:
                    del self.runtime.plugins[plugin_id]  # and its compiled module with it
            self._order_cache.clear()
        if lp is None:
            return False
        self.tools.drop_owner(f"plugin:{plugin_id}")
        self.tools.release(f"plugin:{plugin_id}")
        self._stop_servers(servers)
        self.start_released_servers(lp)  # a name it contested may be another's alone now
        self.observe.unloaded(plugin_id)
        log.info("plugin %s unloaded", plugin_id)
        return True

    def read_enable_state(self) -> None:
        """Read the enable state again (another process may have written it)."""
        self.enable_state = EnableState(self.config)

    def rescan(self) -> reload.RescanReport:
        """Pick up new, changed, removed, enabled and disabled plugins (docs/lifecycle.md)."""
        return reload.rescan(self)

    def session_ended(self, session_id: str) -> None:
        """Delete the session's state in the store."""
        if self._state is not None:
            self._state.end_session(session_id)

    def keeps_session_state(self) -> bool:
        """Whether a state store is open (ending a session then deletes its rows)."""
        return self._state is not None

    @contextmanager
    def _plugin_session(self, plugin_id: str) -> Iterator[Session]:
        """The session a plugin's tool call made outside any session runs its tool_call
        middleware in: no session_start or session_end hooks (the plugin started no
        conversation); what its layers kept in session scope goes when the call ends."""
        s = Session(self, f"plugin-{plugin_id}-{random_hex()[:12]}", {})
        try:
            yield s
        finally:
            if self.keeps_session_state():
                self.session_ended(s.id)

    def asession(self, session_id: str | None = None, state: Mapping[str, Any] | None = None,
                 inline_below_ms: float | None = None) -> Any:
        """`async with host.asession() as s:` — a hook whose worst case (its plugins'
        timeouts) is below `inline_below_ms` runs on the loop, others off it (wasmext.aio)."""
        from wasmext.aio import asession

        return asession(self, session_id, state, inline_below_ms)

    @contextmanager
    def session(self, session_id: str | None = None,
                state: Mapping[str, Any] | None = None, *,
                user_id: str | None = None) -> Iterator[Session]:
        """A session: `session_start` on entry, `session_end` on exit; `user_id` picks
        the user whose output-extension activations its `#name`s use."""
        s = Session(self, session_id or random_hex(), dict(state or {}))
        s.user_id = user_id
        traced = tracing.ACTIVE
        with contextlib.nullcontext() if traced is None else traced.current(s.open_span()):
            s.start()
            try:
                yield s
            except BaseException as exc:
                s.close_span(f"{type(exc).__name__}: {exc}", end=False)
                raise
            finally:
                s.end()
