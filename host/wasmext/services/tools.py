"""The tool registry: host (Python) tools and plugin tools behind one interface.

A plugin registers tools in its registration map:

    "tools": [{"name": "lookup", "description": "...", "input_schema": {...},
               "output_schema"?: {...}, "title"?: "...", "annotations"?: {...}}]

and serves them as its `on_tool` hook, `{"name": "lookup", "args": {...}}`
(entries may carry a `pattern`, so one plugin can route tools to handlers).
The registry names a plugin tool `{plugin_id}__{name}`; a plugin can never
shadow a host tool (or a tool another owner registered), names and
descriptions are length-limited and stripped of control characters. Every
schema is compiled once, when its tool is created, with jsonschema-rs and the
linear-time Rust regex engine (no backtracking: a pattern such as `^(a|a)*$`
cannot stall the host); a schema that does not compile is refused. A plugin's
schema is bounded before it compiles: in bytes, in depth, and in its size with
every `$ref` expanded (`MAX_EXPANDED_NODES`), since a few kilobytes of `anyOf`s
that each name the next definition twice are checked in 2^N steps, holding the
interpreter lock; its `$ref`s must be local JSON pointers (`#/$defs/...`). Each owner
claims its name prefix (`calc` for `calc__*`): a plugin id, an MCP server name
and a host tool prefix never share one, so no owner takes another's tool. A
call validates its arguments against the compiled schema, runs through the
`tool_call` middleware, and
answers `{"status": "ok", "output": ...}` or `{"status": "error", "error":
{"message", "code"?}}`. Plugins call tools with the `tool.call` op when granted
`tools` and `tool:<pattern>` (fnmatch), nested at most `MAX_DEPTH` deep. A
plugin's call runs through the same `tool_call` middleware as the
application's: in the session of the hook call that asked (`SESSIONS`, set by
the host around every plugin call), or, outside any session (an event, a tick,
a bare `plugin.call`), in a session of its own the host makes for it
(`ToolRegistry.plugin_session`). A layer that aborts the chain (a fail-closed
layer refusing the call) answers the plugin `denied`; the tool never ran.
A tool called by a plugin runs inside that plugin's call tree
(`sandbox.calltree`): its time and host calls are the calling plugin's, and a
host tool runs for at most what is left of them (in a worker thread that is
left to finish on its own when the caller's time is up).
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from wasmext.errors import ConfigError, HookAborted, PluginError, ToolLimitError, WasmextError
from wasmext.sandbox import calltree
from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError
from wasmext.services.schema_cache import shared_validator
from wasmext.text import clean, clean_lines, has_unsafe

if TYPE_CHECKING:
    from wasmext.services.hostview import LoadedPlugin, PluginHost

__all__ = ["MAX_DEPTH", "MAX_SCHEMA_BYTES", "MAX_SCHEMA_DEPTH", "MAX_TOOLS_PER_PLUGIN",
           "SESSIONS", "PluginSessions", "Tool", "ToolRegistry", "ToolSession", "bounded_schema",
           "compile_schema", "inert_schema"]


class ToolSession(Protocol):
    """A session, as far as tools need it: traced calls and tool_call middleware."""

    @property
    def id(self) -> str:
        """The session id."""
        ...

    @property
    def trace(self) -> Any:
        """The session's trace."""
        ...

    def middleware(self, kind: str, data: dict[str, Any],
                   core: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """Run the middleware chain of a kind around the core function."""
        ...

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_DESCRIPTION = 1024
MAX_DEPTH = 4
# Caps on what a plugin registers, at load and at runtime alike: each tool costs the
# host a compiled schema and a catalog entry that every tools/list sends.
MAX_TOOLS_PER_PLUGIN = 256
MAX_SCHEMA_BYTES = 65_536  # as JSON text
MAX_SCHEMA_DEPTH = 32  # nested objects and arrays
# Objects and arrays of a schema with each `$ref` replaced by what it names (a ref back
# into its own expansion counts once: that recursion follows the data, which is
# capped). As many as a plain schema of MAX_SCHEMA_BYTES can hold, so a `$ref` costs
# a check no more than writing the schema out would.
MAX_EXPANDED_NODES = 20_000
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})  # values, not schemas

Runner = Callable[[dict[str, Any], "ToolSession | None"], Any]


@dataclass(frozen=True)
class Tool:
    """A callable tool: name, schemas, owner and how to run it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    owner: str  # "host", "plugin:<id>" or "mcp:<server>"
    run: Runner = field(compare=False)
    output_schema: Mapping[str, Any] | None = None
    # The compiled input schema (made on creation; a bad schema is a ConfigError).
    validator: Any = field(default=None, compare=False, repr=False)
    title: str = ""
    annotations: Mapping[str, bool] | None = None  # MCP hints: readOnlyHint, ...

    def __post_init__(self) -> None:
        if self.validator is None:
            object.__setattr__(self, "validator",
                               compile_schema(self.input_schema, f"tool {self.name}"))

    def catalog_entry(self) -> dict[str, Any]:
        """The tool's name, description and input schema, for a model's tool list."""
        return {"name": self.name, "description": self.description,
                "input_schema": dict(self.input_schema)}


def _clean(text: Any, limit: int) -> str:
    return clean_lines(text, limit)


def validation_error() -> type[Exception]:
    """jsonschema_rs's ValidationError (a validator exists, so the module is loaded)."""
    import jsonschema_rs

    return jsonschema_rs.ValidationError


@functools.cache
def _regex() -> Any:
    """Rust regex: linear time, no backreferences (jsonschema_rs with the first schema)."""
    import jsonschema_rs

    return jsonschema_rs.RegexOptions()


def compile_schema(schema: Any, where: str) -> Any:
    """A validator for a JSON Schema 2020-12 `schema`, or a ConfigError saying why not.

    Patterns use the linear-time regex engine (no lookaround, no
    backreferences) and `$ref` never leaves the schema (no retrieval).
    """
    if not isinstance(schema, Mapping):
        raise ConfigError(f"{where}: a schema must be a JSON Schema object")
    try:
        import jsonschema_rs

        return shared_validator(schema, lambda: jsonschema_rs.Draft202012Validator(
            dict(schema), pattern_options=_regex(), offline=True))
    except Exception as exc:  # ValidationError, ReferencingError, ValueError ...
        first = (getattr(exc, "message", None) or str(exc)).splitlines()
        raise ConfigError(f"{where}: invalid JSON Schema: "
                          f"{first[0] if first else type(exc).__name__}") from exc


def bounded_schema(schema: Any, where: str, what: str) -> None:
    """ToolLimitError when a plugin's schema is deeper or larger than the caps (a tool's,
    an output extension's): checked before it is compiled."""
    depth, stack = 0, [(schema, 1)]
    while stack:  # iterative: a hostile nesting cannot exhaust the host's stack
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            depth = max(depth, level)
            if depth > MAX_SCHEMA_DEPTH:
                raise ToolLimitError(f"{where}: {what} nests deeper than "
                                     f"max_schema_depth {MAX_SCHEMA_DEPTH}")
            stack.extend((v, level + 1) for v in (node.values() if isinstance(node, dict)
                                                  else node))
    try:
        size = len(json.dumps(schema, separators=(",", ":"), default=str))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {what} is not JSON: {clean(str(exc), 80)}") from exc
    if size > MAX_SCHEMA_BYTES:
        raise ToolLimitError(f"{where}: {what} is {size} bytes as JSON "
                             f"(max_schema_bytes {MAX_SCHEMA_BYTES})")
    if _expanded_nodes(schema, where, what) > MAX_EXPANDED_NODES:
        raise ToolLimitError(f"{where}: {what} expands through its $refs to more than "
                             f"{MAX_EXPANDED_NODES} objects and arrays")


def _scan(node: Any, where: str, what: str) -> tuple[int, list[str]]:
    """The objects and arrays under `node` without following a `$ref`, and the
    `$ref`s met (ConfigError for a reference that is not a local JSON pointer)."""
    count, refs, stack = 0, [], [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            count += 1
            stack.extend(item)
        elif isinstance(item, dict):
            count += 1
            for key in ("$dynamicRef", "$recursiveRef"):
                if key in item:
                    raise ConfigError(f"{where}: {what} uses {key}; plugin schemas use local "
                                      "$refs (#/$defs/...)")
            ref = item.get("$ref")
            if isinstance(ref, str):
                if ref != "#" and not ref.startswith("#/"):
                    raise ConfigError(f"{where}: {what} has the $ref "
                                      f"{clean(ref, 80)!r}; plugin schemas use local JSON "
                                      "pointers (#/$defs/...)")
                refs.append(ref)
            stack.extend(v for k, v in item.items() if k not in _DATA_KEYWORDS)
    return count, refs


def _pointed(schema: Any, ref: str, where: str, what: str) -> Any:
    node = schema
    for raw in ref[2:].split("/") if ref != "#" else []:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isascii() and part.isdigit() \
                and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ConfigError(f"{where}: {what} has the $ref {clean(ref, 80)!r}, which names "
                              "nothing in it")
    return node


def _expanded_nodes(schema: Any, where: str, what: str) -> int:
    """The size of `schema` with its `$ref`s expanded, counted up to just past
    MAX_EXPANDED_NODES (iterative: a long chain of refs cannot exhaust the stack)."""
    cap = MAX_EXPANDED_NODES + 1
    sizes: dict[str, int] = {}
    scanned: dict[str, tuple[int, list[str]]] = {}

    def scan(ref: str) -> tuple[int, list[str]]:
        if ref not in scanned:
            target = schema if ref == "" else _pointed(schema, ref, where, what)
            scanned[ref] = _scan(target, where, what)
        return scanned[ref]

    own, edges = scan("")
    stack: list[tuple[str, list[str], list[int]]] = [("", edges, [own])]
    on_path = {""}
    while stack:
        ref, pending, total = stack[-1]
        if total[0] >= cap or not pending:
            stack.pop()
            on_path.discard(ref)
            sizes[ref] = min(total[0], cap)
            if stack:
                stack[-1][2][0] += sizes[ref]
            continue
        nxt = pending.pop()
        if nxt in sizes:
            total[0] += sizes[nxt]
        elif nxt in on_path:
            total[0] += 1
        else:
            own, edges = scan(nxt)
            stack.append((nxt, list(edges), [own]))
            on_path.add(nxt)
    return sizes[""]


# Words of a schema written for people: their text is cleaned like a description.
_PROSE = frozenset({"title", "description", "$comment"})


def inert_schema(schema: Any, where: str, what: str) -> Any:
    """A plugin's schema as MCP clients and the operator will see it: the prose of its
    titles, descriptions and comments cleaned (newlines kept), and a ConfigError when any
    other string of it (a property name, an enum value, a pattern) holds a control,
    format or bidi character, since cleaning those would change what the schema means.
    Checked after `bounded_schema`, so the walk is over a size-capped tree."""
    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out: dict[Any, Any] = {}
            for key, value in node.items():
                if isinstance(key, str) and has_unsafe(key):
                    raise ConfigError(f"{where}: {what} has a key with a control, format or "
                                      f"bidi character: {clean(key, 60)!r}")
                out[key] = clean_lines(value, MAX_DESCRIPTION) \
                    if key in _PROSE and isinstance(value, str) else walk(value)
            return out
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, str) and has_unsafe(node):
            raise ConfigError(f"{where}: {what} has a string with a control, format or bidi "
                              f"character: {clean(node, 60)!r}")
        return node
    return walk(schema)


def _check_schema(schema: Any, where: str) -> dict[str, Any]:
    compile_schema(schema, where)
    return dict(schema)


def _object_schema(schema: Any, where: str, what: str) -> dict[str, Any]:
    """MCP clients refuse a whole tools/list over one non-object schema: refuse the tool."""
    checked = _check_schema(schema, where)
    if checked.get("type") != "object":
        raise ConfigError(f"{where}: {what} must be an object schema "
                          f"(\"type\": \"object\"), not {clean(repr(checked.get('type')), 40)}")
    return checked


HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


def _annotations(raw: Any, where: str) -> dict[str, bool] | None:
    """The MCP tool hints a registration map may give (booleans, nothing else)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not set(raw) <= set(HINTS) \
            or not all(isinstance(v, bool) for v in raw.values()):
        raise ConfigError(f"{where}: 'annotations' holds only the booleans {', '.join(HINTS)}")
    return dict(raw)


def _prefix_clash(name: str, prefix: str) -> bool:
    """Do `name` (a tool or a prefix) and the owner prefix `prefix` overlap?"""
    return name == prefix or name.startswith(prefix + "__") or prefix.startswith(name + "__")


class _Depth(threading.local):
    def __init__(self) -> None:
        self.value = 0


class _Sessions(threading.local):
    def __init__(self) -> None:
        self.current: Any = None


# The session of the plugin call running on this thread (None: none, or not a plugin
# call): the host sets it around every plugin call, so that a plugin's `tool.call`
# runs the middleware of the session that asked.
SESSIONS = _Sessions()
# Makes the session a plugin's tool call runs its middleware in when the plugin was
# called outside any session: `plugin_session(plugin_id)` is a context manager.
PluginSessions = Callable[[str], AbstractContextManager[ToolSession]]


class ToolRegistry:
    """Every tool the host can call, by name."""

    def __init__(self, host: PluginHost) -> None:
        self.host = host
        self.tools: dict[str, Tool] = {}
        self.prefixes: dict[str, str] = {}  # claimed name prefix -> owner
        self._lock = threading.Lock()
        self._depth = _Depth()
        # Set by the host: without it a plugin's call outside a session has no session
        # to run the middleware in, and is refused rather than let around it.
        self.plugin_session: PluginSessions | None = None

    # -- registration -------------------------------------------------------------------

    def claim(self, prefix: str, owner: str) -> None:
        """Reserve the names `{prefix}__*` for `owner` (ConfigError when another holds them)."""
        with self._lock:
            for held, other in self.prefixes.items():
                if other != owner and _prefix_clash(prefix, held):
                    raise ConfigError(f"the name prefix {held!r} belongs to {other}; "
                                      f"{owner} cannot use {prefix!r}")
            for tool in self.tools.values():
                if tool.owner != owner and tool.name.startswith(prefix + "__"):
                    raise ConfigError(f"tool {tool.name!r} belongs to {tool.owner}; "
                                      f"{owner} cannot use {prefix!r}")
            self.prefixes[prefix] = owner

    def release(self, owner: str) -> None:
        """Give up the tool-name prefixes the owner holds."""
        with self._lock:
            for prefix in [p for p, o in self.prefixes.items() if o == owner]:
                del self.prefixes[prefix]

    def add(self, tool: Tool) -> None:
        """Add or replace a tool; ConfigError if another owner holds its name or prefix."""
        with self._lock:
            self._add_locked(tool)

    def _add_locked(self, tool: Tool) -> None:
        old = self.tools.get(tool.name)
        if old is not None and old.owner != tool.owner:
            raise ConfigError(f"tool {tool.name!r} belongs to {old.owner}; "
                              f"{tool.owner} cannot shadow it")
        for held, other in self.prefixes.items():
            if other != tool.owner and (tool.name + "__").startswith(held + "__"):
                raise ConfigError(f"tool {tool.name!r}: the prefix {held!r} belongs to "
                                  f"{other}; {tool.owner} cannot shadow its tools")
        self.tools[tool.name] = tool

    def register_python(self, name: str, fn: Callable[[dict[str, Any]], Any], *,
                        description: str = "", input_schema: Mapping[str, Any] | None = None
                        ) -> Tool:
        """A host tool: `fn(args)` returns the output; an exception is an error result."""
        if not NAME_RE.match(name):
            raise ConfigError(f"tool name {name!r}: letters, digits, '_' and '-', 1-64")
        schema = _check_schema(dict(input_schema or {"type": "object"}), f"tool {name}")
        tool = Tool(name, _clean(description, MAX_DESCRIPTION), schema, "host",
                    lambda args, session: calltree.run_bounded(fn, args))
        prefix, sep, _ = name.partition("__")
        if sep:
            self.claim(prefix, "host")
        self.add(tool)
        return tool

    def _plugin_tool(self, plugin_id: str, spec: Any, where: str) -> Tool:
        """A plugin's tool from one registration entry; ConfigError (or ToolLimitError
        for a cap) naming `where` when the entry breaks a rule."""
        if not isinstance(spec, dict) or not NAME_RE.match(str(spec.get("name", ""))):
            raise ConfigError(f"{where}: 'name' must be letters, digits, '_' or '-' (1-64)")
        short = spec["name"]
        schema = spec.get("input_schema", {"type": "object"})
        out = spec.get("output_schema")
        bounded_schema(schema, where, "input_schema")
        schema = inert_schema(schema, where, "input_schema")
        if out is not None:
            bounded_schema(out, where, "output_schema")
            out = inert_schema(out, where, "output_schema")
        return Tool(f"{plugin_id}__{short}", _clean(spec.get("description", ""), MAX_DESCRIPTION),
                    _object_schema(schema, where, "input_schema"),
                    f"plugin:{plugin_id}", self._plugin_runner(plugin_id, short),
                    _object_schema(out, where, "output_schema") if out is not None else None,
                    title=clean(spec.get("title", ""), 128),
                    annotations=_annotations(spec.get("annotations"), where))

    def register_plugin(self, lp: LoadedPlugin) -> list[str]:
        """The tools in a plugin's registration map; returns the problems found."""
        raw = lp.plugin.registration.extra.get("tools")
        raw = [] if raw is None else raw
        problems: list[str] = []
        if not isinstance(raw, list):
            problems, raw = [f"plugin {lp.id}: 'tools' must be an array"], []
        if len(raw) > MAX_TOOLS_PER_PLUGIN:
            problems.append(f"plugin {lp.id}: {len(raw)} tools; at most "
                            f"{MAX_TOOLS_PER_PLUGIN} are kept")
            raw = raw[:MAX_TOOLS_PER_PLUGIN]
        owner = f"plugin:{lp.id}"
        # Re-registering (a reload) replaces in place: a tool that stays is never missing.
        # Tools the old instance registered at runtime go with it (its state is gone).
        stale = {n for n, t in dict(self.tools).items() if t.owner == owner}
        for i, spec in enumerate(raw):
            where = f"plugin {lp.id} tools[{i}]"
            try:
                tool = self._plugin_tool(lp.id, spec, where)
                self.add(tool)
                stale.discard(tool.name)
            except ConfigError as err:
                problems.append(err.message)
        with self._lock:
            for name in stale:
                if self.tools.get(name) is not None and self.tools[name].owner == owner:
                    del self.tools[name]
        return problems

    def register_runtime(self, plugin_id: str, spec: Any) -> tuple[Tool, bool]:
        """A tool a loaded plugin registers after load (the `tool.register` op), under the
        rules and caps of registration-time tools: (the tool, whether it replaced one).
        ConfigError for a broken rule, ToolLimitError for a cap."""
        where = f"plugin {plugin_id} tool.register"
        tool = self._plugin_tool(plugin_id, spec, where)
        owner = f"plugin:{plugin_id}"
        with self._lock:  # counted and added at once: concurrent calls cannot pass the cap
            old = self.tools.get(tool.name)
            replaced = old is not None and old.owner == owner
            held = sum(1 for t in self.tools.values() if t.owner == owner)
            if not replaced and held >= MAX_TOOLS_PER_PLUGIN:
                raise ToolLimitError(f"{where}: plugin {plugin_id} already has {held} tools "
                                     f"(max_tools_per_plugin {MAX_TOOLS_PER_PLUGIN})",
                                     plugin_id=plugin_id)
            self._add_locked(tool)  # the ownership and prefix rules of every tool
        return tool, replaced

    def drop_owner(self, owner: str) -> None:
        """Remove every tool of the owner."""
        with self._lock:
            for name in [n for n, t in self.tools.items() if t.owner == owner]:
                del self.tools[name]

    def _plugin_runner(self, plugin_id: str, short: str) -> Runner:
        def run(args: dict[str, Any], session: ToolSession | None) -> Any:
            # Through the host: the call is traced, metered and its faults recorded.
            result, error = self.host.try_call(plugin_id, "on_tool",
                                               {"name": short, "args": args}, session)
            if result is None:
                code, _, message = (error or "failed").partition(": ")
                cause = getattr(error, "error", None)  # a CallFailure: the guest's error
                raise PluginError(message or code, code=code if message else "failed",
                                  plugin_id=plugin_id, hook="on_tool",
                                  suggestion=getattr(cause, "suggestion", None),
                                  help_url=getattr(cause, "help_url", None))
            return result.value
        return run

    # -- calling ------------------------------------------------------------------------

    def catalog(self) -> list[dict[str, Any]]:
        """Every tool's catalog entry, by name."""
        return [t.catalog_entry() for t in sorted(self.tools.values(), key=lambda t: t.name)]

    def execute(self, name: str, args: Any, session: ToolSession | None = None) -> dict[str, Any]:
        """Validate the arguments and run the tool (no middleware): a result map."""
        tool = self.tools.get(name)
        if tool is None:
            return {"status": "error", "error": {"message": f"no tool {name!r}",
                                                 "code": "not_found"}}
        try:
            tool.validator.validate(args)
        except (validation_error(), ValueError) as exc:  # evaluated only when one is raised
            message = (getattr(exc, "message", None) or str(exc)).splitlines()[0]
            return {"status": "error", "error": {"message": f"invalid arguments: {message}",
                                                 "code": "invalid"}}
        try:
            return {"status": "ok", "output": tool.run(args, session)}
        except calltree.OutOfTime as exc:
            return {"status": "error", "error": {"message": str(exc), "code": "timeout"}}
        except PluginError as err:  # code and message were scrubbed where they entered
            error = {"message": clean(err.message), "code": clean(err.code, 64)}
            if err.suggestion:  # what the user can do about it, and where to read more
                error["suggestion"] = err.suggestion
            if err.help_url:
                error["help_url"] = err.help_url
            return {"status": "error", "error": error}
        except WasmextError as err:
            return {"status": "error", "error": {"message": err.describe(), "code": "failed"}}
        except Exception as exc:  # a host tool's own failure is the caller's result
            return {"status": "error", "error": {"message": clean(f"{type(exc).__name__}: {exc}"),
                                                 "code": "failed"}}

    def call(self, name: str, args: Any, session: ToolSession | None = None,
             call_id: str = "", metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """`execute` wrapped in the tool_call middleware (when there is a session);
        `metadata` is what the layers get as the call's metadata (default empty)."""
        if session is None:
            return self.execute(name, args)
        data = {"turn_id": "", "step": 0, "call_id": call_id, "tool": name, "args": args,
                "metadata": dict(metadata or {})}
        return session.middleware("tool_call", data,
                                  lambda d: self.execute(d["tool"], d.get("args", {}), session))

    def _plugin_call(self, plugin_id: str, name: str, args: Any) -> dict[str, Any]:
        """A plugin's tool call, through the tool_call middleware of the session that
        asked (or of one made for it): a middleware abort is the op's `denied`."""
        session = SESSIONS.current
        if getattr(session, "middleware", None) is None:  # none, or no middleware to run
            session = None
        # Who asked, for the layers: the plugin cannot set a call's metadata itself.
        metadata = {"caller": f"plugin:{plugin_id}"}
        if session is None and self.plugin_session is None:
            # Never around the middleware: refused.
            raise OpError("unavailable", "this host runs no tool_call middleware for "
                          "plugins' tool calls outside a session")
        try:
            if session is not None:
                return self.call(name, args, session, metadata=metadata)
            assert self.plugin_session is not None
            with self.plugin_session(plugin_id) as own:
                return self.call(name, args, own, metadata=metadata)
        except HookAborted as err:
            # The layer's own words say why (scrubbed where they entered the host).
            why = err.message if err.cause is None else \
                f"{err.message} ({getattr(err.cause, 'message', '')})"
            raise OpError("denied", f"tool {clean(name, 128)!r}: the tool_call middleware "
                          f"of {clean(err.plugin_id or 'a plugin', 128)} stopped the call: "
                          f"{clean(why, 300)}") from err
        except WasmextError as err:
            raise OpError("failed", f"tool {clean(name, 128)!r}: the tool_call middleware "
                          f"failed: {clean(err.describe(), 300)}") from err

    def install(self, services: HostServices) -> None:
        """Register the tool.call host call (tool: grants, bounded nesting)."""
        def tool_call(ctx: CallContext, req: dict[str, Any]) -> Any:
            name = req.get("name")
            if not isinstance(name, str):
                raise OpError("invalid", "'name' must be a string")
            lp = self.host.plugins.get(ctx.plugin_id)
            grants = lp.plugin.grants if lp else frozenset()
            if not any(g.startswith("tool:") and fnmatch.fnmatchcase(name, g[5:])
                       for g in grants):
                raise OpError("denied", f"plugin {ctx.plugin_id} may not call tool {name!r}")
            if self._depth.value >= MAX_DEPTH:
                raise OpError("limit", f"tool calls nested deeper than {MAX_DEPTH}")
            left = calltree.remaining()
            if left is not None and left <= 0:
                raise OpError("limit", "the calling plugin's time is up")
            # The tool's time and host calls are this plugin's (its call tree's), and
            # so are those of the middleware layers around it (hooks.middleware).
            self._depth.value += 1
            try:
                return self._plugin_call(ctx.plugin_id, name, req.get("args", {}))
            finally:
                self._depth.value -= 1
        services.register("tool.call", tool_call)

        def tool_register(ctx: CallContext, req: dict[str, Any]) -> Any:
            if ctx.plugin_id not in self.host.plugins:
                raise OpError("not_found", f"plugin {ctx.plugin_id} is not loaded in this host")
            spec = {k: v for k, v in req.items() if k != "op"}
            try:
                tool, replaced = self.register_runtime(ctx.plugin_id, spec)
            except ToolLimitError as err:
                raise OpError("limit", clean(err.message)) from err
            except ConfigError as err:
                raise OpError("invalid", clean(err.message)) from err
            return {"name": tool.name, "replaced": replaced}
        services.register("tool.register", tool_register)
