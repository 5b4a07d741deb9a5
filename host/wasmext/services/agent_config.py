"""The `[agents]` section of wasmext.toml: agents the operator declares for `wasmext run`.

    [agents.reviewer]                      # the operator's own Python code
    target = "mytools.review:review"       # imported at start; review(input) -> answer
    [agents.helper]
    target = "mytools.helper:Helper"       # factory: a fresh Helper() per call,
    factory = true                         # helper.ask(input), then helper.close()
    [agents.summarizer]                    # answered by the host's model ([llm])
    system = "Summarise the text you are given in one sentence."
    model = "small-model"                  # default: the [llm] model
    max_tokens = 256

An agent is either a `target` ("package.module:attribute", dotted attributes
allowed) or a model agent (`system`), never both. A name is what an
`agents:<pattern>` grant matches, so it holds no pattern character: letters,
digits, `.`, `_` and `-`, 1 to 128. `load_agents` imports the targets when the
Host starts; a module that is missing (or fails to import), an attribute that
is missing or not callable is one ConfigError naming every such agent and its
import path, no traceback.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, Field, model_validator

from wasmext.services.agents import GRANTABLE_NAME, run_asker, run_time_left
from wasmext.services.llm.client import ChatRequest
from wasmext.services.llm.service import LlmService
from wasmext.text import clean
from wasmext.validation import SECTION, Count, config_error, problem

__all__ = ["AgentName", "AgentSpec", "AgentTable", "ModelAgent", "load_agents"]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
TARGET_RE = re.compile(rf"{_IDENT}(\.{_IDENT})*:{_IDENT}(\.{_IDENT})*")  # fullmatch
DEFAULT_MAX_TOKENS = 1024
MODEL_TIMEOUT_S = 60.0  # a model agent's request when it runs outside any agent run


def _agent_name(value: str) -> str:
    if not GRANTABLE_NAME.fullmatch(value):
        problem("not an agent name (letters, digits, '.', '_' and '-', 1-128; no pattern "
                "characters: an agents:<pattern> grant matches it)")
    return value


AgentName = Annotated[str, AfterValidator(_agent_name)]


class AgentTable(BaseModel):
    """One [agents.NAME] table: a Python target, or a system prompt for the host's model."""

    model_config = SECTION

    target: Annotated[str, Field(max_length=300)] | None = None
    factory: bool = False
    system: Annotated[str, Field(min_length=1, max_length=100_000)] | None = None
    model: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    max_tokens: Count | None = None

    @model_validator(mode="after")
    def _kind(self) -> AgentTable:
        if self.target is not None and not TARGET_RE.fullmatch(self.target):
            problem("must be 'package.module:attribute'", "target")
        if (self.target is None) == (self.system is None):
            problem("give either target (Python code) or system (a model agent)")
        if self.target is not None:
            for name in ("model", "max_tokens"):
                if name in self.model_fields_set:
                    problem("is for a model agent (system), not a target", name)
        elif "factory" in self.model_fields_set:
            problem("is for a target, not a model agent", "factory")
        return self

    def spec(self, name: str) -> AgentSpec:
        """The validated table as an AgentSpec named `name`."""
        return AgentSpec(name, self.target, self.factory, self.system, self.model,
                         self.max_tokens or DEFAULT_MAX_TOKENS)


@dataclass(frozen=True)
class AgentSpec:
    """A declared agent: `target` (imported at start, `factory` as `register` takes it), or
    `system` (a model agent: the host's model under that system prompt)."""

    name: str
    target: str | None = None
    factory: bool = False
    system: str | None = None
    model: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS


class ModelAgent:
    """An agent answered by the host's model (llm.complete's): `system`, then the input."""

    def __init__(self, spec: AgentSpec, llm: Callable[[], LlmService]) -> None:
        self.spec = spec
        self.llm = llm  # the host's service, read per call (`wasmext run` may set its model)

    def __call__(self, data: Any) -> str:
        """The model's text for `data` (a string, else its JSON) under the system prompt,
        its tokens charged to the budgets of the plugin that asked (as its own
        llm.complete would be: per call, session, day, in flight)."""
        llm = self.llm()
        model = self.spec.model or llm.model
        if llm.completer is None or model is None:
            raise RuntimeError("the host has no model configured ([llm] url and model)")
        asker = run_asker()
        if asker is None:  # only agents.request and agents.send start a model agent
            raise RuntimeError("a model agent answers a plugin's agents.request only")
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        left = run_time_left()
        answer, _ = llm.charged_completion(asker, ChatRequest(
            [{"role": "system", "content": str(self.spec.system)},
             {"role": "user", "content": text}], model, self.spec.max_tokens),
            timeout_s=MODEL_TIMEOUT_S if left is None else left)
        return answer.text


def _resolve(target: str) -> Callable[..., Any] | str:
    """The callable `target` names, or why not (a reason for the operator)."""
    module_name, _, attrs = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # whatever the operator's module raises while importing
        reason = f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        if isinstance(exc, ModuleNotFoundError) and exc.name is not None and \
                (module_name == exc.name or module_name.startswith(exc.name + ".")):
            # The module itself is not on the path (not one it imports): most often its
            # folder, which is not added for it, e.g. the config's own.
            reason += " (targets are imported from the Python path: add its folder to " \
                      "PYTHONPATH)"
        return reason
    for i, attr in enumerate(attrs.split(".")):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            where = ".".join([module_name, *attrs.split(".")[:i]])
            return f"{where} has no attribute {attr!r}"
    if not callable(obj):
        return f"{target} is not callable (a {type(obj).__name__})"
    return obj  # type: ignore[no-any-return]


def load_agents(specs: Mapping[str, AgentSpec], llm: Callable[[], LlmService],
                source: Path | None = None) -> dict[str, tuple[Callable[..., Any], bool]]:
    """Every declared agent as (callable, factory), its target imported; or one
    ConfigError naming each agent whose target cannot be used, with its import path."""
    found: dict[str, tuple[Callable[..., Any], bool]] = {}
    problems: list[tuple[str, str]] = []
    for name, spec in sorted(specs.items()):
        if spec.target is None:
            found[name] = (ModelAgent(spec, llm), False)
            continue
        resolved = _resolve(spec.target)
        if isinstance(resolved, str):
            problems.append((clean(f"agents.{name}.target", 100),
                             clean(f"agent {name}: {resolved}", 300)))
        else:
            found[name] = (resolved, spec.factory)
    if problems:
        raise config_error(problems, source or "config")
    return found
