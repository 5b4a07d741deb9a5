"""plugin.toml: what a plugin says about itself, validated field by field.

Every error names the file and the field, so an author can fix it without
reading host code. Unknown top-level tables are refused: a typo must not be a
silently ignored limit. A manifest is untrusted text: it is read under a size
and a nesting cap, and `load_folder` holds the folder rules (no symlink out of
a plugin folder) for every path that loads a plugin from a folder. What it
asks for in `[limits]` is only a request: see `sandbox.limits.effective_limits`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, get_args, get_origin

from wasmext._abi import ABI_MAJOR
from wasmext._toml import ConfigTextError, parse_text, read_capped
from wasmext.capabilities import capability_typo
from wasmext.errors import ConfigError, ManifestError, UnsafeFolder
from wasmext.sandbox.limits import Limits

if TYPE_CHECKING:
    from wasmext.mcp.config import McpServerConfig

ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$")
SEMVER_RE = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
SETTING_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
KNOWN_KEYS = {"id", "version", "description", "abi", "priority", "wasm", "limits",
              "capabilities", "settings", "build", "before", "after", "failure", "mcp"}
FAILURE_POLICIES = ("open", "closed", "reload")
MAX_MANIFEST_BYTES = 256 * 1024


def version_key(version: str) -> tuple[Any, ...]:
    """SemVer precedence as a sort key: numbers, then a release above its pre-releases,
    whose dot parts compare numerically when numeric, below any text part (build
    metadata ignored). A string that is no SemVer sorts below every version."""
    if SEMVER_RE.match(version) is None:
        return (-1,)
    core, _, pre = version.split("+", 1)[0].partition("-")
    parts = tuple(int(n) for n in core.split("."))
    if not pre:
        return (*parts, 1, ())
    return (*parts, 0, tuple((0, int(p), "") if p.isdigit() else (1, 0, p)
                             for p in pre.split(".")))


# A setting's declared `type` (JSON Schema's words): the Python values it admits. A
# bool is never an integer or a number, though Python says it is an int.
SETTING_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,)}
_TYPE_PHRASES = {"string": "a string", "integer": "an integer", "number": "a number",
                 "boolean": "true or false", "array": "an array", "object": "a table"}


def setting_type_of(value: Any) -> str | None:
    """The setting type a default value declares (None for None)."""
    if value is None:
        return None
    for name in ("boolean", "integer", "number", "string", "array", "object"):
        if _is(value, name):
            return name
    return None


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "boolean"
    return isinstance(value, SETTING_TYPES[kind])


@dataclass(frozen=True)
class Setting:
    """One declared setting; `type` is declared or taken from the default."""

    name: str
    default: Any = None
    env: str | None = None
    sensitive: bool = False
    required: bool = False
    description: str = ""
    type: str | None = None

    def problem(self, value: Any) -> str | None:
        """Why `value` cannot be this setting's value ("must be an integer"), or None."""
        if self.type is None or _is(value, self.type):
            return None
        return f"must be {_TYPE_PHRASES[self.type]}"


@dataclass(frozen=True)
class BuildSpec:
    """How to build a plugin: language, sources and extra files."""

    lang: str
    sources: tuple[str, ...]
    include: tuple[str, ...] = ()
    # A component of the plugin's own WIT world (components only; the typed functions
    # it exports are its tools): the WIT folder inside the plugin folder, and the world.
    wit: str | None = None
    world: str | None = None


@dataclass(frozen=True)
class Manifest:
    """A parsed plugin.toml."""

    path: Path
    id: str
    version: str
    description: str = ""
    abi: int = ABI_MAJOR
    priority: int = 50
    wasm: str | None = None
    limits: Mapping[str, int] = field(default_factory=dict)
    capabilities: tuple[str, ...] = ()
    settings: tuple[Setting, ...] = ()
    build: BuildSpec | None = None
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    failure: str = "open"
    # MCP servers the plugin asks the host to connect (each needs the grant
    # "mcp-server:<name>"); their tools join the registry like configured ones.
    mcp_servers: tuple[McpServerConfig, ...] = ()
    # "sha256:..." of the plugin.toml bytes this was parsed from ("" when parsed from a
    # table): what a recorded approval pins (lifecycle.approvals).
    source_digest: str = ""
    # The [mcp] table as written: `mcp_servers` above read no host environment (a
    # manifest names variables, only the operator decides which a plugin may read);
    # the host resolves them again with the plugin's allowed variables (`resolve_mcp`).
    mcp_table: Mapping[str, Any] = field(default_factory=dict)

    def resolve_mcp(self, environ: Mapping[str, str]) -> Manifest:
        """This manifest with its MCP servers' `${VAR}`s read from `environ` only."""
        if not self.mcp_table:
            return self
        from wasmext.mcp.config import parse_mcp

        _, servers = parse_mcp(copy.deepcopy(dict(self.mcp_table)), self.path,
                               self.path.parent, environ=environ,
                               quiet=True)  # a refused variable was named once already
        return dataclasses.replace(self, mcp_servers=servers)

    @property
    def asks_for(self) -> tuple[str, ...]:
        """What the plugin asks the operator to grant: its `capabilities`, then
        `mcp-server:NAME` for each MCP server it declares (it runs only with that grant)."""
        servers = tuple(f"mcp-server:{s.name}" for s in self.mcp_servers
                        if f"mcp-server:{s.name}" not in self.capabilities)
        return self.capabilities + servers

    @property
    def wasm_name(self) -> str:
        """The module's file name (default: the plugin id with .wasm)."""
        return self.wasm or f"{self.id}.wasm"

    @cached_property  # frozen: computed once, also for a manifest many loads share
    def wasm_path(self) -> Path:
        """The module's path beside the manifest."""
        return self.path.parent / self.wasm_name


# What pydantic's strict error types mean, said the way the rest of the checks say it.
_TYPE_WORDS = {"int_type": "must be an integer", "bool_type": "must be true or false",
               "string_type": "must be a string", "list_type": "must be an array",
               "dict_type": "must be a table", "model_type": "must be a table",
               "model_attributes_type": "must be a table", "missing": "is required",
               "float_type": "must be a number"}


_CHECKERS: dict[int, Any] = {}  # the specs are module constants, so their ids are stable


def _conforms(kind: Any, value: Any) -> bool | None:
    """Does `value` have the type `kind` as a strict check would have it (True/False), or
    None for a kind this does not know (then the full check decides)?"""
    if isinstance(kind, Mapping):
        return isinstance(value, dict) and _all_conform(kind, value)
    if kind is Any:
        return True
    if kind is str:
        return isinstance(value, str)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    origin, args = get_origin(kind), get_args(kind)
    if origin is list and len(args) == 1:
        return isinstance(value, list) and _every(args[0], value)
    if origin is dict and len(args) == 2:
        return isinstance(value, dict) and _every(args[0], value.keys()) \
            and _every(args[1], value.values())
    return None


def _every(kind: Any, values: Any) -> bool | None:
    verdicts = {_conforms(kind, v) for v in values}
    return None if None in verdicts else False not in verdicts


def _all_conform(fields: Mapping[str, Any], data: Any) -> bool | None:
    """Every field of `data` of its type and every required one there (None: not known)."""
    if not isinstance(data, Mapping):
        return False
    verdict: bool | None = True
    for key, kind in fields.items():
        name = key.rstrip("!")
        if name not in data:
            if key.endswith("!"):
                return False
            continue
        found = _conforms(kind, data[name])
        if found is False:
            return False
        if found is None:
            verdict = None
    return verdict


def type_problems(fields: Mapping[str, Any], data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Every type problem of `data` against `fields` (name -> type, or a nested mapping for
    a table), all at once, as (dotted field, "must be ..."). Strict: "1" is no integer.
    Keys not in `fields` are left to the detailed checks that follow."""
    # A manifest without a problem (nearly every one) is told so without building the
    # checking model: loading a plugin then needs no pydantic.
    return [] if _all_conform(fields, data) else _model_problems(fields, data, prefix)


def _model_problems(fields: Mapping[str, Any], data: Any, prefix: str) -> list[tuple[str, str]]:
    """`type_problems` by a pydantic model built from `fields`: what each problem says."""
    from pydantic import ConfigDict, ValidationError, create_model

    def model(spec: Mapping[str, Any], name: str) -> Any:
        cols: dict[str, Any] = {}
        for key, kind in spec.items():
            required = key.endswith("!")
            key = key.rstrip("!")
            typ = model(kind, f"{name}_{key}") if isinstance(kind, Mapping) else kind
            cols[key] = (typ, ... if required else None)
        return create_model(name, __config__=ConfigDict(strict=True, extra="allow"), **cols)

    checker = _CHECKERS.get(id(fields))
    if checker is None:  # building a model costs milliseconds: once per spec
        checker = _CHECKERS[id(fields)] = model(fields, "Checked")
    try:
        checker.model_validate(data)
    except ValidationError as exc:
        out = []
        for err in exc.errors():
            fld = ".".join(str(part) for part in err["loc"])
            word = _TYPE_WORDS.get(err["type"], str(err["msg"]).lower())
            out.append((prefix + fld, word))
        return out
    return []


MANIFEST_TYPES: dict[str, Any] = {
    "id!": str, "version!": str, "description": str, "abi": int, "priority": int,
    "wasm": str, "limits": dict[str, int], "capabilities": list[str],
    "settings": dict[str, dict[str, Any]], "failure": str, "before": list[str],
    "after": list[str], "mcp": dict[str, Any],
    "build": {"lang!": str, "sources!": list[str], "include": list[str], "wit": str,
              "world": str},
}


def _need(cond: bool, path: Path, fld: str, why: str) -> None:
    if not cond:
        raise ManifestError(f"{path}: field '{fld}': {why}", path=path, field=fld)


def _str_list(raw: Any, path: Path, fld: str) -> tuple[str, ...]:
    _need(isinstance(raw, list) and all(isinstance(x, str) for x in raw), path, fld,
          "must be an array of strings")
    return tuple(raw)


def _settings(raw: Any, path: Path) -> tuple[Setting, ...]:
    _need(isinstance(raw, dict), path, "settings", "must be a table of tables")
    out = []
    for name, spec in raw.items():
        fld = f"settings.{name}"
        _need(bool(SETTING_RE.match(name)), path, fld, "name must be an identifier")
        _need(isinstance(spec, dict), path, fld, "must be a table")
        unknown = set(spec) - {"default", "env", "sensitive", "required", "description",
                               "type"}
        _need(not unknown, path, fld, f"unknown keys {sorted(unknown)}")
        kind = spec.get("type", setting_type_of(spec.get("default")))
        _need(kind is None or kind in SETTING_TYPES, path, f"{fld}.type",
              f"must be one of {', '.join(SETTING_TYPES)}")
        default = spec.get("default")
        _need(default is None or kind is None or _is(default, kind), path, f"{fld}.default",
              f"must be {_TYPE_PHRASES.get(kind or '', kind)} (its type)")
        env = spec.get("env")
        _need(env is None or isinstance(env, str), path, f"{fld}.env", "must be a string")
        for flag in ("sensitive", "required"):
            _need(isinstance(spec.get(flag, False), bool), path, f"{fld}.{flag}", "must be a bool")
        desc = spec.get("description", "")
        _need(isinstance(desc, str), path, f"{fld}.description", "must be a string")
        out.append(Setting(name, default, env, spec.get("sensitive", False),
                           spec.get("required", False), desc, kind))
    return tuple(out)


def _build(raw: Any, path: Path) -> BuildSpec:
    _need(isinstance(raw, dict), path, "build", "must be a table")
    lang = raw.get("lang")
    _need(isinstance(lang, str), path, "build.lang", "must be a string")
    sources = _str_list(raw.get("sources"), path, "build.sources")
    _need(len(sources) > 0, path, "build.sources", "must name at least one file")
    for src in sources:
        _need(not Path(src).is_absolute() and ".." not in Path(src).parts, path,
              "build.sources", f"{src!r} must stay inside the plugin folder")
    include = _str_list(raw.get("include", []), path, "build.include")
    wit, world = raw.get("wit"), raw.get("world")
    _need(wit is None or (isinstance(wit, str) and not Path(wit).is_absolute()
                          and ".." not in Path(wit).parts), path, "build.wit",
          "must be a folder inside the plugin folder")
    _need(world is None or isinstance(world, str), path, "build.world", "must be a string")
    _need((wit is None) == (world is None), path, "build.world",
          "build.wit and build.world go together")
    return BuildSpec(lang, sources, include, wit, world)


class _Verbatim(Mapping[str, str]):
    """An environment in which `${NAME}` stays `${NAME}`: a manifest alone reads nothing
    of the host's environment (the host resolves it with `Manifest.resolve_mcp`)."""

    def __getitem__(self, name: str) -> str:
        return "${" + name + "}"

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


_VERBATIM = _Verbatim()


def parse_manifest(data: Mapping[str, Any], path: Path) -> Manifest:
    """Validate a decoded plugin.toml; `path` is only used in messages and paths."""
    unknown = set(data) - KNOWN_KEYS
    _need(not unknown, path, sorted(unknown)[0] if unknown else "", "unknown field")
    problems = type_problems(MANIFEST_TYPES, data)
    if problems:  # every type problem at once, each naming its field
        raise ManifestError(f"{path}: " + "; ".join(f"field '{f}': {w}" for f, w in problems),
                            path=path, field=problems[0][0])
    pid = data.get("id")
    _need(isinstance(pid, str) and bool(ID_RE.match(pid)), path, "id",
          "lowercase letters, digits and hyphens, 1-64 characters, no leading/trailing hyphen")
    version = data.get("version")
    _need(isinstance(version, str) and bool(SEMVER_RE.match(version)), path, "version",
          "must be a SemVer string such as 1.2.3")
    desc = data.get("description", "")
    _need(isinstance(desc, str), path, "description", "must be a string")
    abi = data.get("abi", ABI_MAJOR)
    _need(abi == ABI_MAJOR and type(abi) is int, path, "abi",
          f"this host speaks ABI major {ABI_MAJOR}")
    prio = data.get("priority", 50)
    _need(type(prio) is int and 0 <= prio <= 100, path, "priority", "must be an int 0-100")
    wasm = data.get("wasm")
    if wasm is not None:
        _need(isinstance(wasm, str) and "/" not in wasm and "\\" not in wasm
              and wasm.endswith(".wasm") and wasm not in (".wasm",), path, "wasm",
              "must be a file name ending in .wasm beside plugin.toml")
    limits_raw = data.get("limits", {})
    _need(isinstance(limits_raw, dict), path, "limits", "must be a table")
    try:
        Limits().replace(**limits_raw)
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"{path}: field 'limits': {exc}", path=path, field="limits") from exc
    caps = _str_list(data.get("capabilities", []), path, "capabilities")
    for n, cap in enumerate(caps):  # a near miss asks for nothing any grant gives
        typo = capability_typo(cap)
        _need(typo is None, path, f"capabilities[{n}]", typo or "")
    settings = _settings(data.get("settings", {}), path)
    build = _build(data["build"], path) if "build" in data else None
    order = {}
    for key in ("before", "after"):
        order[key] = _str_list(data.get(key, []), path, key)
        for other in order[key]:
            _need(bool(ID_RE.match(other)), path, key, f"{other!r} is not a plugin id")
    failure = data.get("failure", "open")
    _need(failure in FAILURE_POLICIES, path, "failure", f"must be one of {FAILURE_POLICIES}")
    mcp_raw = data.get("mcp", {})
    _need(isinstance(mcp_raw, dict), path, "mcp", "must be a table")
    mcp_servers: tuple[McpServerConfig, ...] = ()
    # Most plugins declare no MCP server: the MCP config models (pydantic) load only for
    # one that does, so loading a plugin (and a plugin's own test) does not import them.
    try:  # relative paths: the plugin's folder; no host environment (`resolve_mcp`)
        if mcp_raw:
            from wasmext.mcp.config import parse_mcp

            _, mcp_servers = parse_mcp(copy.deepcopy(mcp_raw), path,
                                       path.parent if path is not None else None,
                                       environ=_VERBATIM, quiet=True)
    except ConfigError as err:  # every problem of the table, said as the manifest's
        raise ManifestError(err.message, path=path, field=err.problems[0][0]
                            if err.problems else "mcp") from None
    assert isinstance(pid, str) and isinstance(version, str)
    # Read-only: one validated Manifest may serve many loads (see `load_manifest`).
    return Manifest(path, pid, version, desc, abi, prio, wasm,
                    MappingProxyType(dict(limits_raw)), caps,
                    settings, build, order["before"], order["after"], failure, mcp_servers,
                    mcp_table=MappingProxyType(copy.deepcopy(dict(mcp_raw))))


# Validated manifests by (path, SHA-256 of the file's bytes): loading many copies
# of a plugin, or reloading one, validates its plugin.toml once. Keyed on the
# content, never on a name or a file time, so an edited file is always parsed
# again. A manifest reads nothing of the environment (its MCP servers' `${VAR}`s
# stay verbatim until the host resolves them), so every one can be kept.
_MEMO_SIZE = 256
_memo: OrderedDict[tuple[str, bytes], Manifest] = OrderedDict()
_memo_lock = threading.Lock()


def load_manifest(path: Path) -> Manifest:
    """Read and validate `path` (a plugin.toml), under the size and nesting caps.

    Raises ManifestError and nothing else, whatever the file holds.
    """
    try:
        raw = read_capped(path, MAX_MANIFEST_BYTES)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}", path=path) from exc
    except ConfigTextError as exc:
        raise ManifestError(f"{path}: {exc}", path=path) from exc
    key = (str(path), hashlib.sha256(raw).digest())
    with _memo_lock:
        known = _memo.get(key)
        if known is not None:
            _memo.move_to_end(key)
            return known
    manifest = dataclasses.replace(_validate(raw, path),
                                   source_digest=f"sha256:{key[1].hex()}")
    with _memo_lock:
        _memo[key] = manifest
        while len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
    return manifest


def _validate(raw: bytes, path: Path) -> Manifest:
    try:
        data = parse_text(raw, max_bytes=MAX_MANIFEST_BYTES)
    except ConfigTextError as exc:
        raise ManifestError(f"{path}: {exc}", path=path) from exc
    try:
        return parse_manifest(data, path)
    except ManifestError:
        raise
    except Exception as exc:  # a validator's bug must not become the host's crash
        raise ManifestError(f"{path}: cannot validate: {type(exc).__name__}: {exc}",
                            path=path) from exc


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop
        return False
    return True


def load_folder(folder: Path) -> Manifest:
    """The manifest of a plugin folder, under the folder rules every loader follows
    (discovery, `Runtime.load`, `Host.add`, `wasmext inspect/call/build`).

    The folder must not be a symlink; its plugin.toml and its module must not
    resolve outside it (a module not built yet passes: loading reports it).
    Raises UnsafeFolder for a symlink trick, ManifestError for the manifest.
    """
    folder = Path(folder)
    if folder.is_symlink():
        raise UnsafeFolder(f"{folder}: plugin folder is a symlink; refusing it")
    toml = folder / "plugin.toml"
    if toml.is_symlink() and not _inside(toml, folder):
        raise UnsafeFolder(f"{toml}: resolves outside its plugin folder")
    if folder.is_dir() and not toml.is_symlink() and not toml.exists():
        # The usual slip (`wasmext call .` one folder too high or low): say it plainly,
        # with the folder whole, not "plugin.toml: cannot read: No such file or directory".
        raise ManifestError(f"{os.path.abspath(folder)} has no plugin.toml, so it is no "
                            "plugin folder (`wasmext new NAME --lang LANG` makes one)",
                            path=toml)
    manifest = load_manifest(toml)
    wasm = manifest.wasm_path
    # The module's name has no separator (parse_manifest), so a module that is not a
    # symlink is an entry of the folder itself: only a symlink needs resolving.
    if wasm.is_symlink() and not _inside(wasm, folder):
        raise UnsafeFolder(f"{wasm}: resolves outside its plugin folder", plugin_id=manifest.id)
    return manifest
