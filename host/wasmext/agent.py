"""`wasmext run`: one agent session driven through every hook kind.

Per turn: input messages, plain text, the routing policy's pre and validator
stages, before_agent, prompt assembly (additions, tool guidance), then the turn
middleware around the step loop; each step is wrapped by step middleware and
runs before_tool_selection, before_model, the model, after_model and every
tool call through tool_call middleware with before_tool/after_tool. Then
on_llm_output, tags, output extensions, the policy's post stages and
after_agent. The session starts and ends with session_start/session_end.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wasmext.errors import ConfigError, HookAborted, InstancePoolFull, PipelineError
from wasmext.hooks.extensions import parse_requests, requestable
from wasmext.hooks.messages import new_message, wire
from wasmext.hooks.pipeline import Policy
from wasmext.host import Host
from wasmext.models import Model
from wasmext.session import Session

if TYPE_CHECKING:
    from wasmext.cluster.routing import Router

__all__ = ["DEMO_TOOLS", "Agent", "Tool", "TurnReport"]

_TAG_NAMES = re.compile(r"<([A-Za-z_][\w.\-:]*)[\s>]")
_OPS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.Mod: operator.mod, ast.USub: operator.neg,
    ast.UAdd: operator.pos, ast.FloorDiv: operator.floordiv}


@dataclass(frozen=True)
class Tool:
    """A demo host tool for `wasmext run`; registered into the host's tool registry."""

    name: str
    description: str
    run: Callable[[dict[str, Any]], Any]
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})


def _calc(args: Mapping[str, Any]) -> Any:
    expr = str(args.get("expression", ""))
    if len(expr) > 200:
        raise ValueError("expression too long")

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError("only numbers and + - * / // % are allowed")

    return ev(ast.parse(expr, mode="eval"))


DEMO_TOOLS = {t.name: t for t in (
    Tool("calc", "Evaluate an arithmetic expression.", _calc,
         {"type": "object", "properties": {"expression": {"type": "string", "maxLength": 200}},
          "required": ["expression"]}),
    Tool("clock", "The current UTC time.", lambda a: dt.datetime.now(dt.timezone.utc)
         .strftime("%Y-%m-%dT%H:%M:%SZ")),
    Tool("shell", "Run a shell command (the demo never runs it).",
         lambda a: "refused: the demo shell runs nothing"),
    Tool("debug", "Dump internal state.", lambda a: {"debug": True}),
)}


@dataclass
class TurnReport:
    """What one turn did: the reply, why it ended, its tool calls and extensions."""

    user: str
    response: str = ""
    finish_reason: str = "text_response"
    aborted: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    extensions: list[dict[str, Any]] = field(default_factory=list)
    system: str = ""
    # Each step's result as the step layers left it (status, tool_results, metadata).
    steps: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The report as a plain dict."""
        return dict(self.__dict__)


class Agent:
    """Runs turns of one session through the host's plugins."""

    def __init__(self, host: Host, model: Model, *, tools: Mapping[str, Tool] | None = None,
                 system: str = "You are a helpful assistant.", policy: Policy | None = None,
                 max_steps: int = 4, routing: Callable[[], Router] | None = None,
                 tenant_id: str = "default", name: str = "assistant") -> None:
        """`routing`: the current Router (stages in-process or remote over NATS), asked
        at each turn, so a policy or registry edited on disk applies from the next one;
        it takes the place of `policy`. `name`: the session's agent_name unless the
        application set one."""
        self.host = host
        self.name = name  # the session's agent_name unless the application set one
        self.model = model
        for tool in (DEMO_TOOLS if tools is None else tools).values():
            if tool.name not in host.tools.tools:
                self._register(tool)
        # Every tool of the registry: the host's and the plugins' own.
        self.tools = dict(host.tools.tools)
        # The catalog is complete now: guidance naming a tool nobody has is reported.
        said = {e.message for e in host.load_errors}
        host.load_errors.extend(e for e in host.unknown_guided_tools() if e.message not in said)
        self.system = system
        self.policy = policy
        self.routing = routing
        self.tenant_id = tenant_id
        self.max_steps = max_steps
        self.turn_tokens: dict[str, int] = {}  # the model's tokens in the current turn
        self.total_tokens = {"input": 0, "output": 0}  # and in every turn so far

    def _register(self, tool: Tool) -> None:
        """Add a built-in tool; a name another owner claimed (an MCP server called like
        the tool) is a ConfigError naming both and the ways out."""
        try:
            self.host.tools.register_python(tool.name, tool.run, description=tool.description,
                                            input_schema=tool.input_schema)
        except ConfigError as err:
            prefix = tool.name.partition("__")[0]
            kind, _, name = self.host.tools.prefixes.get(prefix, "").partition(":")
            if kind == "mcp":
                who, way = f"the MCP server {name!r}", \
                    f"rename the server ([mcp.servers.{name}] under another name)"
            elif kind == "plugin":
                who, way = f"the plugin {name!r}", f"disable the plugin (wasmext disable {name})"
            else:
                raise
            raise ConfigError(
                f"{who} (tools {prefix}__*) and the built-in tool {tool.name!r} share the "
                f"name {prefix!r}: {way} or run without the built-in tools "
                "(--no-builtin-tools)") from err

    def run_turn(self, session: Session, index: int, user: str) -> TurnReport:
        """Run one user turn through the session's hooks; an abort (or a full instance pool)
        is reported, not raised."""
        report = TurnReport(user)
        if not session.context.get("agent_name"):
            session.context["agent_name"] = self.name
        self.turn_tokens = {"input": 0, "output": 0}
        session.trace.note("turn", f"begin turn {index}", user[:80])
        try:
            self._turn(session, index, user, report)
        except (HookAborted, PipelineError, InstancePoolFull) as err:
            # A full instance pool is the host's capacity, not the session's end: the
            # turn says so and the next turn runs once a slot is free.
            report.aborted, report.finish_reason = err.describe(), "error"
            session.trace.note("turn", "abort", err.describe(), err.plugin_id)
        return report

    def _turn(self, s: Session, index: int, user: str, report: TurnReport) -> None:
        # The model never sees `#extension` requests; they run on its answer.
        asked, _ = parse_requests(user, set(requestable(s, re.findall(r"#([a-z0-9_-]+)",
                                                                       user))))
        messages = s.on_input_messages([{"role": "user", "content": asked}]).value
        text = s.on_plain_text(messages[-1].get("content", user)).value
        router = self.routing() if self.routing is not None else None
        if router is not None:
            text = router.run(s, text, provider=lambda d: d["message"], part="input",
                              tenant_id=self.tenant_id).message["payload"]
        elif self.policy is not None:
            text = s.pipeline(self.policy, text, provider=lambda d: d["message"]).message[
                "payload"]
        gate = s.lifecycle("before_agent", prompt=text, context={"turn": index})
        if not gate.proceed:
            report.aborted, report.finish_reason = gate.stop_reason, "error"
            return
        tags = [*_TAG_NAMES.findall(user), *re.findall(r"#([a-z0-9-]+)", user)]
        # Read again each turn: a plugin may have registered tools since (tool.register),
        # an MCP server changed its list, or a reload dropped some.
        self.tools = dict(self.host.tools.tools)
        guidance = s.tool_guidance(list(self.tools))
        prompt = s.prompt("\n".join([self.system, *s.system_messages,
                                     *gate.system_messages, guidance.text()]).strip(),
                          text, tags=tags, context={"turn": index})
        report.system = prompt.system
        s.messages.append(new_message("user", prompt.user, {"type": "user"}))
        s.context["turn_id"] = f"turn-{index}"
        turn_data = {"turn_id": f"turn-{index}", "input": {"role": "user", "content": text},
                     "messages": list(s.messages), "metadata": {}}
        def core(d: dict[str, Any]) -> dict[str, Any]:
            if isinstance(d.get("messages"), list):  # turn middleware may have edited them
                s.messages[:] = d["messages"]
            return self._steps(s, index, prompt.system, guidance.tools, report)

        result = s.middleware("turn", turn_data, core)
        response = str(result.get("response", ""))
        report.finish_reason = str(result.get("finish_reason", "text_response"))
        response = s.process_tags(s.on_llm_output(response).value)
        _, extensions = s.output_extensions(user, response, {
            "provider": getattr(self.model, "provider", type(self.model).__name__),
            "model": self.model.name, "tokens": {
                **self.turn_tokens, **{f"total_{k}": v for k, v in self.total_tokens.items()}},
            "tools_used": list(dict.fromkeys(c["tool"] for c in report.tool_calls))})
        report.extensions = [e.as_dict() for e in extensions]
        if router is not None:
            response = router.run(s, response, provider=lambda d: d["message"], part="output",
                                  tenant_id=self.tenant_id).message["payload"]
        elif self.policy is not None:
            response = s.pipeline(Policy(self.policy.policy_id, post=self.policy.post),
                                  response, provider=lambda d: d["message"]).message["payload"]
        report.response = response
        s.messages.append(new_message("assistant", response,
                                      {"type": "assistant", "step_id": f"turn-{index}"}))
        s.lifecycle("after_agent", response=response, tool_calls=report.tool_calls)

    def _steps(self, s: Session, index: int, system: str, tools: list[str],
               report: TurnReport) -> dict[str, Any]:
        for step in range(self.max_steps):
            data = {"turn_id": f"turn-{index}", "step": step, "messages": list(s.messages),
                    "tools": [{"name": n, "description": self.tools[n].description}
                              for n in tools], "metadata": {}}
            def core(d: dict[str, Any], step: int = step) -> dict[str, Any]:
                return self._step(s, index, step, system, d, report)

            out = s.middleware("step", data, core)
            report.steps.append(out)
            if not out.get("tool_calls"):
                return {"finish_reason": "text_response", "response": out.get("response", "")}
        return {"finish_reason": "max_steps", "response": ""}

    def _step(self, s: Session, index: int, step: int, system: str, data: dict[str, Any],
              report: TurnReport) -> dict[str, Any]:
        catalog = [t for t in data.get("tools", []) if isinstance(t, dict) and
                   t.get("name") in self.tools]
        s.lifecycle("before_tool_selection", available_tools=[t["name"] for t in catalog])
        msgs = [{"role": "system", "content": system}, *s.messages]
        gate = s.lifecycle("before_model", messages=msgs, model=self.model.name)
        if not gate.proceed:
            raise HookAborted(gate.stop_reason or "before_model aborted",
                              plugin_id=gate.stopped_by, hook="before_model")
        if gate.system_messages:
            msgs[0] = {"role": "system", "content": system + "\n" + gate.system_message}
        answer = self.model.complete([wire(m) for m in msgs], catalog, index, step)
        s.lifecycle("after_model", response=answer["response"], tokens=answer.get("tokens"))
        used = answer.get("tokens")
        for kind in ("input", "output"):
            count = used.get(kind) if isinstance(used, dict) else None
            self.turn_tokens[kind] += count if isinstance(count, int) else 0
            self.total_tokens[kind] += count if isinstance(count, int) else 0
        if answer["tool_calls"]:
            # The chat-completions shape: the assistant's calls, then one answer each.
            s.messages.append(new_message(
                "assistant", answer["response"] or "",
                {"type": "assistant", "step_id": f"turn-{index}/{step}"},
                tool_calls=[{"id": c["call_id"], "type": "function",
                             "function": {"name": c["tool"], "arguments": json.dumps(c["args"])}}
                            for c in answer["tool_calls"]]))
        results = []
        for call in answer["tool_calls"]:
            result = self._tool(s, index, step, call, {t["name"] for t in catalog})
            report.tool_calls.append({"tool": call["tool"], "args": call["args"],
                                      "result": result})
            results.append({"tool_call_id": call["call_id"], "tool_name": call["tool"],
                            **result})
            s.messages.append(new_message(
                "tool", json.dumps(result.get("output", result.get("error")), default=str),
                {"type": "tool", "tool_call_id": call["call_id"], "tool_name": call["tool"]},
                tool_call_id=call["call_id"]))
        # The seed's StepResult: status, the calls and their results, the step's metadata.
        return {"response": answer["response"], "tool_calls": answer["tool_calls"],
                "status": "completed", "has_tool_calls": bool(answer["tool_calls"]),
                "tool_results": results, "metadata": data.get("metadata", {})}

    def _tool(self, s: Session, index: int, step: int, call: dict[str, Any],
              allowed: set[str]) -> dict[str, Any]:
        data = {"turn_id": f"turn-{index}", "step": step, "call_id": call["call_id"],
                "tool": call["tool"], "args": call["args"], "metadata": {}}

        def core(d: dict[str, Any]) -> dict[str, Any]:
            name, args = d["tool"], d.get("args", {})
            gate = s.lifecycle("before_tool", tool_name=name, args=args)
            if not gate.proceed:
                return {"status": "error", "error": {"message": gate.stop_reason}}
            if name not in allowed:
                result = {"status": "error", "error": {"message": f"no tool {name!r}"}}
            else:
                result = self.host.tools.execute(name, args, s)
            s.lifecycle("after_tool", tool_name=name, result=result)
            return result

        return s.middleware("tool_call", data, core)
