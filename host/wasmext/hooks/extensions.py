"""Output extensions (`#name[:param]`), prompt additions and tool guidance.

Output extensions run after the answer, in the order the query asked for
them; each sees every earlier result (`previous`, a list), and a failure marks
only its own result failed: the answer is never touched. A plugin may declare
its extensions in its registration map (`"output_extensions": [{"name",
"allowed_params", "content_type", "output_target", "output_schema"}]`): a param
outside `allowed_params` is an error result and the plugin is not called, and a
result whose content does not match `output_schema` (JSON Schema 2020-12) fails,
its content dropped. A `#name`
(starting with a letter) that cannot run is an error result too, and is
stripped from the query like the others.

Which names a query may use: a session without a user (`Session.user_id`
unset) may ask for every extension a plugin serves, under its own name; a
session with one may ask only for that user's activations
(`wasmext.hooks.activations`), each naming an extension and a default param
that `#name:param` overrides.

Each result carries its duration, the model tokens and cost the plugin used
through llm.complete during the call, a content type, an `output_target`
(`silent`, `chat_append`, `status_panel`) and host-written `metadata`. The
runner emits `extension.start` before each, `extension.result` after each,
then `extension.results` (all of the turn's) and `extension.usage` (the turn's
tokens and cost); with a turn id in the session's context the turn's results
and events are saved with the turn. Prompt additions and tool guidance come
from the registration map ("prompt", "tool_guidance") and are assembled in
plugin-id order, so the prompt is the same whatever order plugins loaded in.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wasmext.errors import ConfigError, WasmextError
from wasmext.hooks.activations import Activation
from wasmext.hooks.tags import matches
from wasmext.services.tools import bounded_schema, compile_schema, validation_error
from wasmext.text import clean

if TYPE_CHECKING:
    from wasmext.hooks.context import HookSession

__all__ = ["OUTPUT_TARGETS", "ExtensionResult", "Prompt", "ToolGuidance", "assemble_prompt",
           "declared", "parse_requests", "requestable", "run_output_extensions",
           "tool_guidance"]

_REQUEST = re.compile(r"(?<![\w#&])#([a-z0-9][a-z0-9_-]{0,63})(?::([\w.\-]{1,64}))?(?![\w-])")
POSITIONS = ("system_prefix", "system_suffix", "user_prefix", "user_suffix")
OUTPUT_TARGETS = ("silent", "chat_append", "status_panel")
RESULT_KEY = "extension_result"  # the envelope of the SDKs' result builders
TRACE_EVENTS = 256  # the most recent trace lines an extension is shown
# What the application may put in an extension's context (003's level 2), beyond
# the ids the host fills in itself; anything else it passes is dropped.
CONTEXT_KEYS = ("provider", "model", "tokens", "tools_used", "child_results", "profile",
                "collected_data")


@dataclass
class ExtensionResult:
    """One requested extension's outcome; `name` is the name the query used."""

    name: str
    param: str | None
    content: Any = None
    success: bool = True
    error: str | None = None
    plugin_id: str | None = None
    content_type: str = "application/json"
    duration_ms: float = 0.0
    usage: dict[str, int] = field(default_factory=dict)  # model tokens: input, output
    cost: float = 0.0
    extension: str | None = None  # what the activation names (= name without activations)
    output_target: str = "silent"
    metadata: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The result as a plain dict."""
        return {"name": self.name, "param": self.param, "content": self.content,
                "success": self.success, "error": self.error, "plugin": self.plugin_id,
                "content_type": self.content_type, "duration_ms": self.duration_ms,
                "usage": dict(self.usage), "cost": self.cost,
                "extension": self.extension or self.name,
                "output_target": self.output_target, "metadata": dict(self.metadata)}


def parse_requests(query: str, known: set[str]) -> tuple[str, list[tuple[str, str | None]]]:
    """(query without the requests, [(name, param)]) for names in `known`."""
    found: list[tuple[str, str | None]] = []

    def strip(m: re.Match[str]) -> str:
        if m.group(1) not in known:
            return m.group(0)
        found.append((m.group(1), m.group(2)))
        return ""

    clean_query = _REQUEST.sub(strip, query)
    return re.sub(r"[ \t]{2,}", " ", clean_query).strip(), found


def declared(host: Any, name: str) -> dict[str, Any] | None:
    """The declaration of the output extension `name` by the plugin serving it (`{}` when
    it declares nothing), or None when no loaded plugin serves `name`."""
    for entry in host.ordered("output_extension"):
        if entry.pattern and matches(entry.pattern, name):
            lp = host.plugins.get(entry.plugin_id)
            decls = lp.plugin.registration.extra.get("output_extensions") if lp else None
            for decl in decls if isinstance(decls, list) else []:
                if isinstance(decl, dict) and decl.get("name") == name:
                    return decl
            return {}
    return None


def _user(session: HookSession) -> str | None:
    user = getattr(session, "user_id", None)
    return user if isinstance(user, str) and user else None


def requestable(session: HookSession, requested: Iterable[str] = ()
                ) -> dict[str, Activation]:
    """The names this session's queries may use: the user's active activations, or
    (no user) every exact name a plugin serves and each of `requested` that a
    prefix pattern (`tool_*`) serves, as itself."""
    user = _user(session)
    registry = getattr(session.host, "extensions", None)
    if user is not None and registry is not None:
        try:
            return {a.name: a for a in registry.list(user)}
        except WasmextError as err:  # the store is down: no extension runs, the turn does
            session.trace.note("output_extension", "failed",
                               f"the user's activations cannot be read: {err.describe()}")
            return {}
    patterns = [e.pattern for e in session.host.ordered("output_extension") if e.pattern]
    names = {p for p in patterns if not p.endswith("*")}
    names.update(n for n in requested if any(matches(p, n) for p in patterns))
    return {n: Activation(n, n) for n in names}


def _llm_used(session: HookSession, plugin_id: str) -> tuple[dict[str, int], float]:
    llm = getattr(session.host, "llm", None)  # a host without llm.complete reports none
    if llm is None:
        return {}, 0.0
    used = llm.usage(plugin_id)
    return dict(used["tokens"]), float(used["cost"])


def _run_one(session: HookSession, entry: Any, outcome: ExtensionResult,
             data: dict[str, Any], decl: dict[str, Any]) -> None:
    allowed = decl.get("allowed_params")
    if isinstance(allowed, list) and outcome.param is not None and outcome.param not in allowed:
        outcome.success = False
        outcome.error = f"param {outcome.param!r} is not allowed for #{outcome.name}"
        return
    tokens_before, cost_before = _llm_used(session, entry.plugin_id)
    started = time.perf_counter()
    try:
        result, error = session.host.try_call(entry.plugin_id, "output_extension", data,
                                              session)
    except WasmextError as err:  # e.g. an answer over the input cap: this result fails
        result, error = None, err.describe()
    outcome.duration_ms = round((time.perf_counter() - started) * 1000, 3)
    tokens_after, cost_after = _llm_used(session, entry.plugin_id)
    used = {k: tokens_after.get(k, 0) - tokens_before.get(k, 0) for k in ("input", "output")}
    if any(used.values()):
        outcome.usage, outcome.cost = used, round(cost_after - cost_before, 9)
    built_type: str | None = None
    if error is not None:
        outcome.success, outcome.error = False, error
    elif result is not None:
        outcome.content = result.value if result.changed else None
        built_type = _unwrap(outcome)
    declared_type = built_type or decl.get("content_type")
    outcome.content_type = clean(declared_type, 128) if isinstance(declared_type, str) else \
        "text/plain" if isinstance(outcome.content, str) else "application/json"
    if outcome.success and decl.get("output_schema") is not None:
        _check_output(outcome, decl["output_schema"])


def _check_output(outcome: ExtensionResult, schema: Any) -> None:
    """003's output_schema: a result whose content does not match it fails, without its
    content (whoever reads a successful #name relies on the declared shape)."""
    where = f"#{outcome.name}: output_schema"
    try:
        bounded_schema(schema, where, "output_schema")
        validator = compile_schema(schema, where)  # compiled once, kept (schema_cache)
        validator.validate(outcome.content)
    except ConfigError as err:  # refused at load; a plugin registered before that rule
        outcome.success, outcome.content, outcome.error = False, None, clean(err.message, 300)
    except (validation_error(), ValueError) as exc:  # evaluated only when one is raised
        first = (getattr(exc, "message", None) or str(exc)).splitlines()
        outcome.success, outcome.content = False, None
        outcome.error = clean(f"#{outcome.name}: the result does not match its output_schema: "
                              f"{first[0] if first else type(exc).__name__}", 300)
    outcome.metadata["output_schema"] = "valid" if outcome.success else "invalid"


def _unwrap(outcome: ExtensionResult) -> str | None:
    """A value built by an SDK's json_result/text_result, `{"extension_result":
    {"content", "content_type"?, "metadata"?}}`: its content, its metadata under
    the result's `metadata.plugin`, and its content type (returned)."""
    value = outcome.content
    if not (isinstance(value, dict) and len(value) == 1 and
            isinstance(value.get(RESULT_KEY), dict)):
        return None
    built = value[RESULT_KEY]
    outcome.content = built.get("content")
    if isinstance(built.get("metadata"), dict) and built["metadata"]:
        outcome.metadata["plugin"] = built["metadata"]
    kind = built.get("content_type")
    return kind if isinstance(kind, str) else None


def _context(session: HookSession, query: str, given: Mapping[str, Any],
             children: list[dict[str, Any]]) -> dict[str, Any]:
    """003's level-2 context: ids from the session, the rest from the application;
    `children`: the agents.request runs of the session since its last extensions."""
    ctx = getattr(session, "context", {})
    events = getattr(session.trace, "events", [])
    context: dict[str, Any] = {
        "session_id": session.id, "turn_id": ctx.get("turn_id"), "user_id": _user(session),
        "original_query": query,
        # Other plugins' details may quote their own data: only who did what is shown.
        "execution_trace": [{"hook": e.hook, "plugin": e.plugin_id, "outcome": e.outcome}
                            for e in events[-TRACE_EVENTS:]]}
    context.update({k: given[k] for k in CONTEXT_KEYS if k in given})
    if "child_results" not in context:
        context["child_results"] = children
    return context


def _emit(session: HookSession, events: list[dict[str, Any]], topic: str,
          **fields: Any) -> None:
    events.append({"type": topic, **fields})
    session.host.observe.bus.emit_runtime(topic, **fields)


def run_output_extensions(session: HookSession, query: str, answer: str,
                          context: Mapping[str, Any] | None = None
                          ) -> tuple[str, list[ExtensionResult]]:
    """Run the extensions a query asks for; the query without its requests and the results."""
    entries = session.host.ordered("output_extension")
    requested = {m.group(1) for m in _REQUEST.finditer(query)}
    available = requestable(session, requested)
    unknown = {name for name in requested - set(available) if name[0].isalpha()}
    clean_query, requests = parse_requests(query, (requested & set(available)) | unknown)
    turn_id = getattr(session, "context", {}).get("turn_id")
    ids = {"session_id": session.id, "turn_id": turn_id}
    agents = getattr(session.host, "agents", None)
    children = agents.take_results(session.id) if agents is not None else []
    level2 = _context(session, query, context or {}, children) if requests else {}
    results: list[ExtensionResult] = []
    events: list[dict[str, Any]] = []
    for name, param in requests:
        act = available.get(name)
        outcome = ExtensionResult(name, param, extension=act.extension if act else name)
        asked = param
        if act is not None and param is None:
            outcome.param = param = act.default_param
        _emit(session, events, "extension.start", **ids, name=name,
              extension=outcome.extension, param=param)
        entry = None if act is None else next(
            (e for e in entries if e.pattern and matches(e.pattern, act.extension)), None)
        decl = {} if act is None else declared(session.host, act.extension) or {}
        target = decl.get("output_target", "silent")
        if entry is None:
            outcome.success = False
            outcome.error = f"no output extension #{name}" if act is None else \
                f"#{name}: no loaded plugin serves {act.extension!r}"
        elif target not in OUTPUT_TARGETS:
            outcome.success, outcome.plugin_id = False, entry.plugin_id
            outcome.error = (f"#{name}: declared output_target {clean(str(target), 64)!r} is "
                             f"not one of {', '.join(OUTPUT_TARGETS)}")
        else:
            outcome.plugin_id, outcome.output_target = entry.plugin_id, target
            data = {"name": act.extension if act else name, "activation": name,
                    "param": param, "answer": answer, "query": clean_query,
                    "previous": [r.as_dict() for r in results], "context": level2,
                    "config": dict(act.config) if act else {}}
            _run_one(session, entry, outcome, data, decl)
        outcome.metadata.update({"activation": name, "extension": outcome.extension,
                                 "execution_time_ms": outcome.duration_ms,
                                 "param_from": "query" if asked is not None else
                                 "activation" if param is not None else None})
        results.append(outcome)
        _emit(session, events, "extension.result", session_id=session.id, name=name,
              param=outcome.param, plugin_id=outcome.plugin_id, success=outcome.success,
              error=outcome.error, content_type=outcome.content_type,
              duration_ms=outcome.duration_ms, usage=dict(outcome.usage), cost=outcome.cost,
              turn_id=turn_id, extension=outcome.extension,
              output_target=outcome.output_target)
    if requests:
        _finish(session, query, results, events, ids, (context or {}).get("tokens"))
    return clean_query, results


def _finish(session: HookSession, query: str, results: list[ExtensionResult],
            events: list[dict[str, Any]], ids: dict[str, Any], turn_tokens: Any) -> None:
    """The combined event, the turn's usage, and the turn's record in the store."""
    _emit(session, events, "extension.results", **ids,
          results=[r.as_dict() for r in results])
    usage = {"input_tokens": sum(r.usage.get("input", 0) for r in results),
             "output_tokens": sum(r.usage.get("output", 0) for r in results),
             "cost": round(sum(r.cost for r in results), 9), "count": len(results)}
    # As 003's token_update: the turn's own model tokens (when the application gave
    # them) plus the extensions'.
    main = turn_tokens if isinstance(turn_tokens, Mapping) else {}
    for kind in ("input", "output"):
        spent = main.get(kind)
        usage[f"turn_{kind}_tokens"] = usage[f"{kind}_tokens"] + (
            spent if type(spent) is int and spent >= 0 else 0)
    _emit(session, events, "extension.usage", **ids, **usage)
    registry = getattr(session.host, "extensions", None)
    if ids["turn_id"] is None or registry is None:
        return
    record = {"turn_id": str(ids["turn_id"]), "query": query, "user_id": _user(session),
              "results": [r.as_dict() for r in results], "events": events, "usage": usage,
              "saved_at": time.time()}
    try:
        registry.save_turn(session.id, str(ids["turn_id"]), record)
    except WasmextError as err:  # the answer and the results stand; only the copy is lost
        session.trace.note("output_extension", "failed",
                           f"the turn's extension results were not saved: {err.describe()}")


@dataclass
class Prompt:
    """A system and user prompt after the plugins' additions, and which applied."""

    system: str
    user: str
    applied: list[tuple[str, str]] = field(default_factory=list)  # (plugin id, position)


def _condition(session: HookSession, when: Any, tags: Sequence[str],
               context: dict[str, Any]) -> bool:
    if when is None:
        return True
    if not isinstance(when, dict) or len(when) != 1:
        return False
    (kind, arg), = when.items()
    if kind == "tag_present":
        return isinstance(arg, str) and arg in tags
    if kind == "state_equals" and isinstance(arg, dict):
        return "key" in arg and session.state.get(arg["key"]) == arg.get("value")
    if kind == "context_match" and isinstance(arg, dict) and isinstance(arg.get("pattern"), str):
        return context_matches(arg["pattern"], context.get(str(arg.get("key")), ""))
    return False


def context_matches(pattern: str, value: Any) -> bool:
    """Whether the plugin's `pattern` is found in `value`, by the linear-time regex
    engine: Python's backtracking `re` took 3 s for `^(a|a)*$` against 24 characters
    (doubling with each more), on the host's thread, at every prompt assembled.
    A pattern that engine does not compile matches nothing."""
    try:
        validator = compile_schema({"type": "string", "pattern": pattern}, "context_match")
    except ConfigError:
        return False
    return bool(validator.is_valid(str(value)))


def assemble_prompt(session: HookSession, system: str, user: str, tags: Sequence[str],
                    context: dict[str, Any]) -> Prompt:
    """Add each plugin's prompt additions whose condition holds, at their positions."""
    parts: dict[str, list[str]] = {p: [] for p in POSITIONS}
    prompt = Prompt(system, user)
    for pid in sorted(session.host.plugins):
        additions = session.host.plugins[pid].plugin.registration.extra.get("prompt", [])
        for add in additions if isinstance(additions, list) else []:
            if not isinstance(add, dict) or add.get("position") not in POSITIONS \
                    or not isinstance(add.get("content"), str):
                session.trace.note("prompt", "failed", "malformed prompt addition", pid)
                continue
            if _condition(session, add.get("when"), tags, context):
                parts[add["position"]].append(add["content"])
                prompt.applied.append((pid, add["position"]))
    prompt.system = "\n".join(x for x in [*parts["system_prefix"], system,
                                          *parts["system_suffix"]] if x)
    prompt.user = "".join(parts["user_prefix"]) + user + "".join(parts["user_suffix"])
    return prompt


@dataclass
class ToolGuidance:
    """Plugins' advice on which tools to prefer, avoid and order."""

    tools: list[str]
    preferred: list[str] = field(default_factory=list)
    avoided: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The guidance as a note for the model (advice, never a block)."""
        lines = []
        if self.preferred:
            lines.append("Prefer these tools: " + ", ".join(self.preferred) + ".")
        if self.avoided:
            lines.append("Avoid these tools unless necessary: " + ", ".join(self.avoided) + ".")
        if self.order:
            lines.append("When using several, a good order is: " + " -> ".join(self.order) + ".")
        return "\n".join(lines)


def tool_guidance(session: HookSession, tools: Sequence[str]) -> ToolGuidance:
    """Gather the plugins' tool guidance, limited to the available tools."""
    available = list(tools)
    g = ToolGuidance(available)
    for pid in sorted(session.host.plugins):
        raw = session.host.plugins[pid].plugin.registration.extra.get("tool_guidance")
        if not isinstance(raw, dict):
            continue
        for key in ("preferred", "avoided", "order"):
            names = raw.get(key, [])
            target: list[str] = getattr(g, key)
            for name in names if isinstance(names, list) else []:
                if isinstance(name, str) and name in available and name not in target:
                    target.append(name)
                elif isinstance(name, str) and name not in available:  # said, not dropped
                    session.trace.note("tool_guidance", "unknown tool", name, pid)
    rank = {name: (0 if name in g.preferred else 2 if name in g.avoided else 1)
            for name in available}
    g.tools = sorted(available, key=lambda n: rank[n])
    return g
