"""Runtime: the shared engine, compile cache and host services, and plugin loading.

This is the engine-level embedding object: it loads plugins from a folder with
a plugin.toml, a .wasm file or bytes, and keeps serving whatever any of them
does. The ordering and chaining host of many plugins builds on it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import re
import weakref
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import wasmtime

from wasmext.capabilities import capability_typo
from wasmext.errors import ConfigError, InvalidModule, LoadError, ModuleTooLarge, UnsafeFile
from wasmext.files import read_regular
from wasmext.manifest import ID_RE, Manifest, load_folder
from wasmext.mcp.envsubst import env_refs
from wasmext.sandbox.backends.extism import EXTISM_KERNEL, ExtismPlugin, uses_extism
from wasmext.sandbox.cache import CompileCache
from wasmext.sandbox.compiler import compile_bounded
from wasmext.sandbox.engine import EngineConfig, SharedEngine, shared_engine
from wasmext.sandbox.hostcalls import HostServices
from wasmext.sandbox.limits import Limits, effective_limits
from wasmext.sandbox.module import PluginModule
from wasmext.sandbox.plugin import Plugin, QuarantinePolicy
from wasmext.sandbox.wasmcheck import ModuleCaps, check_memories, inspect, is_component
from wasmext.text import clean

__all__ = ["Runtime", "allowed_environ", "resolve_settings"]

# Its own logger: the command line shows these refusals even where it keeps the rest quiet.
env_log = logging.getLogger("wasmext.env")

_SANITIZE_ID = re.compile(r"[^a-z0-9-]+")


def allowed_environ(manifest: Manifest, allowed: Collection[str],
                    environ: Mapping[str, str] | None = None,
                    denied: Collection[str] = ()) -> dict[str, str]:
    """The part of the environment `manifest` may read: the variables the operator named
    for this plugin (`allowed`), never one in `denied` (the host's own credentials). Each
    variable the manifest names (a setting's `env`, an MCP server's `${VAR}`) outside that
    reads as unset: its value never reaches the plugin; one the environment has (a value
    withheld) is logged once per plugin."""
    env = os.environ if environ is None else environ
    named = {s.env for s in manifest.settings if s.env} | env_refs(dict(manifest.mcp_table))
    for var in sorted(named):
        why = "is a credential of the host itself" if var in denied else \
            f"is not one the operator allowed it ([plugin.{manifest.id}] env)" \
            if var not in allowed else ""
        if why and var in env and (manifest.id, var) not in _refused_env:
            _refused_env.add((manifest.id, var))
            env_log.warning("plugin %s: environment variable %s %s; it reads as unset",
                            manifest.id, clean(var, 128), why,
                            extra={"plugin_id": manifest.id})
    return {v: env[v] for v in named if v in allowed and v not in denied and v in env}


_refused_env: set[tuple[str, str]] = set()  # said once per process, not at every reload


def resolve_settings(manifest: Manifest, overrides: Mapping[str, Any],
                     environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Settings in precedence order: override, then the setting's env var, then default.

    `environ` is what the plugin may read (`allowed_environ`); without it, nothing:
    a manifest alone never reads the host's environment."""
    env = {} if environ is None else environ
    declared = {s.name for s in manifest.settings}
    unknown = sorted(set(overrides) - declared)
    if unknown:
        raise ConfigError(f"plugin {manifest.id}: unknown setting {unknown[0]!r}; declared: "
                          f"{', '.join(sorted(declared)) or 'none'}", plugin_id=manifest.id)
    wrong = [(f"settings.{s.name}", problem) for s in manifest.settings if s.name in overrides
             for problem in [s.problem(overrides[s.name])] if problem is not None]
    if wrong:  # every one at once, each naming its field and the value refused
        secret = {s.name for s in manifest.settings if s.sensitive}

        def shown(name: str) -> str:  # a sensitive value is never repeated
            return "a value of another type" if name in secret else \
                clean(repr(overrides[name]), 64)

        said = "; ".join(f"setting {name!r} {why}, not {shown(name)}"
                         for f, why in wrong for name in [f.removeprefix("settings.")])
        raise ConfigError(f"plugin {manifest.id}: {said}", plugin_id=manifest.id,
                          problems=tuple(wrong))
    values: dict[str, Any] = {}
    for s in manifest.settings:
        if s.name in overrides:
            values[s.name] = overrides[s.name]
        elif s.env and s.env in env:
            values[s.name] = _from_env(manifest.id, s.name, env[s.env], s.type, s.sensitive)
        elif s.default is not None:  # a copy: one manifest serves many loads
            values[s.name] = copy.deepcopy(s.default) if isinstance(s.default, (list, dict)) \
                else s.default
        elif s.required:
            where = f" (or set ${s.env}, allowed by [plugin.{manifest.id}] env)" if s.env \
                else ""
            raise ConfigError(f"plugin {manifest.id}: required setting {s.name!r} is not "
                              f"set{where}", plugin_id=manifest.id)
    return values


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _from_env(plugin_id: str, name: str, raw: str, kind: str | None,
              sensitive: bool = False) -> Any:
    """An environment string converted to the setting's type (declared or its default's)."""
    try:
        if kind == "boolean":
            word = raw.strip().lower()
            if word not in _TRUE | _FALSE:
                raise ValueError(f"{raw!r} is not a bool")
            return word in _TRUE
        if kind == "integer":
            return int(raw)
        if kind == "number":
            return float(raw)
        if kind in ("array", "object"):
            value = json.loads(raw)
            if not isinstance(value, list if kind == "array" else dict):
                raise ValueError(f"is not a JSON {'array' if kind == 'array' else 'object'}")
            return value
    except ValueError as exc:  # the value of a sensitive setting is never repeated
        why = f"is not {kind}" if sensitive else clean(str(exc), 128)
        raise ConfigError(f"plugin {plugin_id}: setting {name!r} from the environment: {why}",
                          plugin_id=plugin_id) from None
    return raw


def _id_from_file(path: Path) -> str:
    pid = _SANITIZE_ID.sub("-", path.stem.lower()).strip("-")[:64].strip("-")
    if not ID_RE.match(pid):
        raise LoadError(f"{path}: cannot derive a plugin id from the file name; pass plugin_id")
    return pid


def _read_module(path: Path, caps: ModuleCaps) -> bytes:
    """A module's bytes; `.wat` text is assembled first (handy for tests and demos)."""
    try:
        raw = read_regular(path, caps.max_module_bytes)
    except UnsafeFile as exc:
        if exc.too_large:
            raise ModuleTooLarge(f"{path}: {exc.strerror} (max_module_bytes)") from exc
        raise LoadError(f"{path}: cannot read: {exc.strerror}") from exc
    except OSError as exc:
        raise LoadError(f"{path}: cannot read: {exc.strerror}") from exc
    if path.suffix != ".wat":
        return raw
    try:
        return bytes(wasmtime.wat2wasm(raw.decode("utf-8")))
    except (UnicodeDecodeError, wasmtime.WasmtimeError) as exc:
        raise InvalidModule(f"{path}: not valid WAT: {exc}") from exc


def _extism_module(engine: SharedEngine, wasm: bytes, caps: ModuleCaps,
                   name: str) -> wasmtime.Module | None:
    """The module, when it is built for Extism (imports the Extism kernel)."""
    if EXTISM_KERNEL.encode() not in wasm:  # cheap: the import names are in the bytes
        return None
    shape = inspect(wasm)
    caps.check(shape, name)  # before compiling, as PluginModule does
    check_memories(shape, name)
    try:
        # Bounded as a native module's compile is: the kernel's name anywhere in the bytes
        # (a custom section) leads here. Extism compiles the module again, in this
        # process and beyond the host's reach; a module that compiled within the caps
        # here costs it about as much.
        module = compile_bounded(engine.on_demand(), wasm, shape, caps, name)
    except wasmtime.WasmtimeError as exc:
        raise InvalidModule(f"does not compile: {exc}") from exc
    return module if uses_extism(module) else None


class Runtime:
    """Loads and holds plugins. Use as a context manager or call close()."""

    def __init__(self, *, engine: EngineConfig | SharedEngine | None = None,
                 cache: CompileCache | bool | None = True, services: HostServices | None = None,
                 policy: Limits | None = None, defaults: Limits | None = None,
                 quarantine: QuarantinePolicy | None = None,
                 module_caps: ModuleCaps | None = None) -> None:
        self.engine = engine if isinstance(engine, SharedEngine) else shared_engine(engine)
        self.cache = CompileCache() if cache is True else (cache or None)
        self.services = services or HostServices()
        self.policy = policy or Limits(
            fuel_per_call=10**10, memory_bytes=4 * 2**30 - 2**16, timeout_ms=10 * 60 * 1000,
            max_input_bytes=2**31, max_output_bytes=2**31, table_elements=1_000_000)
        self.defaults = defaults or Limits()
        self.quarantine = quarantine or QuarantinePolicy()
        self.module_caps = module_caps or ModuleCaps()
        self.plugins: dict[str, Plugin | ExtismPlugin] = {}
        # By file: its signature and the module compiled from it (see _known_module).
        self._modules: dict[Path, tuple[tuple[int, ...], weakref.ref[PluginModule]]] = {}

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _known_module(self, path: Path) -> tuple[PluginModule | None, tuple[int, ...] | None]:
        """The module this runtime compiled from `path` when the file is the same one,
        unchanged (device, inode, size, modification and change times, as Python's own
        bytecode cache judges a source), while a plugin still uses it; and the file's
        signature. A copy of a plugin then skips reading and hashing its module again."""
        if path.suffix == ".wat":
            return None, None
        try:
            st = path.stat()
        except OSError:
            return None, None
        signature = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = self._modules.get(path)
        module = known[1]() if known is not None and known[0] == signature else None
        return module, signature

    def compile(self, wasm: bytes, name: str = "<module>") -> PluginModule:
        """Compile a module with the runtime's engine, cache and module caps."""
        return PluginModule(wasm, name=name, engine=self.engine, cache=self.cache,
                            caps=self.module_caps)

    def precompile(self, wasm: bytes, name: str = "<module>",
                   announce: Callable[[], None] | None = None) -> bool:
        """Put the compiled code of a module or component into the compile cache without
        running any of it, so a later load of the same bytes reads it; True when it had
        to compile (False: already cached, or the runtime has no cache), after calling
        `announce`. The checks a load makes before and after compiling raise here as they
        would there."""
        if self.cache is None:
            return False
        component = is_component(wasm)
        engine = self.engine.on_demand() if component else self.engine
        if self.cache.contains(hashlib.sha256(wasm).hexdigest(), engine, component):
            return False
        if announce is not None:
            announce()
        if component:
            from wasmext.sandbox.backends.component import ComponentModule

            ComponentModule(wasm, name=name, engine=self.engine, cache=self.cache,
                            caps=self.module_caps)
        else:
            self.compile(wasm, name)
        return True

    def load(self, source: Path | str | bytes | bytearray, *, plugin_id: str | None = None,
             limits: Mapping[str, int] | Limits | None = None,
             settings: Mapping[str, Any] | None = None,
             grants: Iterable[str] = (), priority: int | None = None,
             manifest: Manifest | None = None, env: Collection[str] = (),
             denied_env: Collection[str] = (),
             module_bytes: bytes | None = None,
             sensitive: Collection[str] = ()) -> Plugin | ExtismPlugin:
        """Load a plugin folder (with plugin.toml), a .wasm file, or module bytes.

        A folder's settings read only the environment variables named in `env` (the
        operator's choice for this plugin), never one in `denied_env`; `manifest` is
        the folder's already-checked manifest, `module_bytes` its module's already-
        verified bytes (a signed bundle's: the bytes checked are the bytes compiled).
        `sensitive` names settings the operator holds sensitive whatever the manifest
        says (those it injects into requests: the plugin never reads them as config).

        Limits follow `effective_limits`: the runtime defaults with `limits` (the
        host's own choice for this plugin) replacing fields; the manifest's
        `[limits]` may only lower them; the runtime's policy caps everything.
        `priority` replaces the manifest's as the priority of hooks that do not
        state their own.
        """
        if isinstance(source, (bytes, bytearray)):
            pid = plugin_id or "inline"
            wasm, name = bytes(source), pid  # load errors name the plugin (its id is checked first)
            shared, signature, wasm_path = None, None, Path(name)
        else:
            path = Path(source)
            if path.is_dir():
                if manifest is None:
                    manifest = load_folder(path)  # the folder rules: no symlink out of it
                wasm_path = manifest.wasm_path
                if module_bytes is None and not wasm_path.is_file():
                    raise LoadError(f"{wasm_path}: not built yet (run: wasmext build {path})",
                                    plugin_id=manifest.id)
                pid = plugin_id or manifest.id
            else:
                wasm_path = path
                pid = plugin_id or _id_from_file(path)
            shared, signature = self._known_module(wasm_path) if module_bytes is None \
                else (None, None)
            wasm = b"" if shared else module_bytes if module_bytes is not None else \
                _read_module(wasm_path, self.module_caps)
            name = str(wasm_path)
        if not ID_RE.match(pid):
            raise LoadError(f"plugin id {pid!r} must be lowercase letters, digits and hyphens")
        grants = frozenset(grants)
        for grant in sorted(grants):  # a near miss would be a grant no op ever checks
            typo = capability_typo(grant)
            if typo is not None:
                raise ConfigError(f"plugin {pid}: grants: {typo}")
        requested = dict(manifest.limits) if manifest is not None else {}
        eff = effective_limits(self.defaults, requested, limits, self.policy)
        values = resolve_settings(manifest, settings or {},
                                  allowed_environ(manifest, env, denied=denied_env)) \
            if manifest else dict(settings or {})
        sensitive = frozenset(sensitive) | (frozenset(s.name for s in manifest.settings
                                                      if s.sensitive) if manifest
                                            else frozenset())
        prio = priority if priority is not None else manifest.priority if manifest else 50
        component = shared is None and is_component(wasm)
        extism_module = None if shared is not None or component else \
            _extism_module(self.engine, wasm, self.module_caps, name)
        plugin: Plugin | ExtismPlugin
        if component:  # a component of the world wasmext:plugin@1.0.0
            # wasmtime.component and the component backend come with the first component
            from wasmext.sandbox.backends.component import ComponentModule
            from wasmext.sandbox.backends.component_instance import ComponentPlugin

            plugin = ComponentPlugin(
                ComponentModule(wasm, name=name, engine=self.engine, cache=self.cache,
                                caps=self.module_caps), plugin_id=pid, limits=eff,
                settings=values, sensitive=sensitive, grants=frozenset(grants),
                services=self.services, quarantine=self.quarantine, default_priority=prio)
        elif extism_module is not None:
            plugin = ExtismPlugin(wasm, extism_module, plugin_id=pid, limits=eff, settings=values,
                                  sensitive=sensitive, grants=frozenset(grants),
                                  services=self.services, default_priority=prio)
        else:
            module = shared or self.compile(wasm, name)
            if signature is not None:
                self._modules[wasm_path] = (signature, weakref.ref(module))
            plugin = Plugin(module, plugin_id=pid, limits=eff,
                            settings=values, sensitive=sensitive, grants=frozenset(grants),
                            services=self.services, quarantine=self.quarantine,
                            default_priority=prio)
        plugin.requested_limits = requested
        old = self.plugins.pop(pid, None)
        if old is not None:
            old.close()
        self.plugins[pid] = plugin
        return plugin

    def close(self) -> None:
        """Close every plugin of the runtime."""
        for plugin in self.plugins.values():
            plugin.close()
        self.plugins.clear()
