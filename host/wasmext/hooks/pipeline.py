"""Pipeline stages composed by a routing policy: pre, validators, provider, post.

    {"policy_id": "support",
     "pre": [{"id": "normalize-text", "mode": "required", "config": {...}}],
     "validators": [{"id": "guard", "on_fail": "block"}],
     "providers": ["echo-provider",
                   {"id": "crm", "parameters": {"max_tokens": 512}, "priority": 1,
                    "weight": 3}],
     "post": [{"id": "pii-mask", "mode": "optional"}]}

`mode` (pre, post): a failing `required` stage fails the run (PipelineError),
an `optional` one is skipped. A validator answers {"status": "ok"} or
{"status": "reject", "reason"}; a fault or timeout counts as reject, and
`on_fail` decides: block (PipelineError, result.blocked), warn (logged,
carried on) or ignore. Providers are tried until one answers: by `priority`
(lower first, default 0), and among equal priorities in list order, or, when
one of them has a `weight`, in a random order where each goes first with a chance
in proportion to its weight (default 1). A provider gets its `parameters` as
`data.config` (a remote one: as the request's `parameters`).

A policy document is validated as the pydantic model `PolicyDoc` (unknown keys
refused: a misspelt `on-fail` would silently do nothing); a bad one is one
ConfigError naming every problem with its field (`wasmext.validation`).
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, field_validator

from wasmext._toml import ConfigTextError, parse_text, read_capped
from wasmext.errors import ConfigError, PipelineError
from wasmext.text import clean
from wasmext.validation import SECTION, check, problem

if TYPE_CHECKING:
    from wasmext.hooks.context import HookSession

__all__ = ["PipelineResult", "Policy", "PolicyDoc", "ProviderRef", "StageRef", "arun_pipeline",
           "load_policy", "parse_policy", "pipeline_steps", "provider_order", "run_pipeline"]

log = logging.getLogger("wasmext.pipeline")
MAX_REASON = 300  # characters of a validator's reason (or fault) kept in a verdict
Provider = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class StageRef:
    """A stage of a pipeline policy: plugin id, required or optional, and its config."""

    id: str
    mode: str = "required"
    on_fail: str = "block"
    config: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProviderRef:
    """A provider of a policy: its id, its parameters, and where it comes in the order."""

    id: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    priority: int = 0  # lower is tried first
    weight: float | None = None  # among equal priorities: the chance of going first


@dataclass(frozen=True)
class Policy:
    """A pipeline policy: pre stages, validators, providers and post stages."""

    policy_id: str
    pre: tuple[StageRef, ...] = ()
    validators: tuple[StageRef, ...] = ()
    providers: tuple[ProviderRef, ...] = ()
    post: tuple[StageRef, ...] = ()


@dataclass
class PipelineResult:
    """A pipeline's outcome: the message and context, or why it was blocked."""

    message: dict[str, Any]
    context: dict[str, Any]
    blocked: bool = False
    reason: str | None = None
    provider: str | None = None
    warnings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


# A plugin id, or a remote extension's (the reference's ids have underscores).
STAGE_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")


def _stage_id(value: str) -> str:
    if not STAGE_ID_RE.match(value):
        problem("must name a plugin or a registered extension")
    return value


StageId = Annotated[str, AfterValidator(_stage_id)]


class StageTable(BaseModel):
    """A pre or post stage."""

    model_config = SECTION

    id: StageId
    mode: Literal["required", "optional"] = "required"
    config: dict[str, Any] = {}

    def ref(self) -> StageRef:
        """The stage as the pipeline runs it."""
        return StageRef(self.id, mode=self.mode, config=self.config)


class ValidatorTable(BaseModel):
    """A validator stage."""

    model_config = SECTION

    id: StageId
    on_fail: Literal["block", "warn", "ignore"] = "block"
    config: dict[str, Any] = {}

    def ref(self) -> StageRef:
        """The stage as the pipeline runs it."""
        return StageRef(self.id, on_fail=self.on_fail, config=self.config)


class ProviderTable(BaseModel):
    """A provider with parameters, a priority or a weight (a bare id is the defaults)."""

    model_config = SECTION

    id: Annotated[str, Field(min_length=1, max_length=256)]  # "openai:gpt-4.1-mini" too
    parameters: dict[str, Any] = {}
    priority: Annotated[int, Field(strict=True, ge=0, le=1000)] = 0
    weight: Annotated[float, Field(strict=True, gt=0, le=1e6, allow_inf_nan=False)] | None = None

    def ref(self) -> ProviderRef:
        """The provider as the pipeline tries it."""
        return ProviderRef(self.id, self.parameters, self.priority, self.weight)


class PolicyDoc(BaseModel):
    """The rules of a policy document."""

    model_config = SECTION

    policy_id: str = "default"
    pre: list[StageTable] = []
    validators: list[ValidatorTable] = []
    providers: list[ProviderTable] = []
    post: list[StageTable] = []

    @field_validator("providers", mode="before")
    @classmethod
    def _bare_ids(cls, value: Any) -> Any:
        """A provider given by its id alone is a table with the defaults."""
        if not isinstance(value, list):
            return value
        return [{"id": p} if isinstance(p, str) else p for p in value]

    def policy(self) -> Policy:
        """The validated document as the pipeline runs it."""
        return Policy(self.policy_id, tuple(s.ref() for s in self.pre),
                      tuple(s.ref() for s in self.validators),
                      tuple(p.ref() for p in self.providers),
                      tuple(s.ref() for s in self.post))


def parse_policy(raw: Any, source: str = "") -> Policy:
    """A decoded policy document, or one ConfigError naming every problem."""
    return check(PolicyDoc, raw, prefix="policy", source=source).policy()


def load_policy(path: str | Path) -> Policy:
    """A policy from a .json or .toml file."""
    path = Path(path)
    try:
        raw = parse_text(read_capped(path), kind="json" if path.suffix == ".json" else "toml")
    except (OSError, ConfigTextError) as exc:  # size and nesting caps: see _toml
        raise ConfigError(f"{path}: cannot read policy: {exc}") from exc
    return parse_policy(raw, str(path))


def _message_ok(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("message"), dict) \
        and isinstance(value["message"].get("payload"), str)


# One stage call the pipeline asks for: (plugin id, hook, data), answered with what
# `HookHost.try_call` returns. The pipeline's rules are written once, as a generator of
# these; `run_pipeline` answers them by calling, `arun_pipeline` by awaiting.
StageCall = tuple[str, str, dict[str, Any]]
Answer = tuple[Any, str | None]
Steps = Generator[StageCall, Answer, PipelineResult]


def run_pipeline(session: HookSession, policy: Policy, payload: str, context: dict[str, Any],
                 provider: Provider | None = None) -> PipelineResult:
    """Run `policy` on `payload`, each stage through `session.host.try_call`."""
    steps = pipeline_steps(session, policy, payload, context, provider)
    try_call = session.host.try_call
    try:
        call = next(steps)
        while True:
            call = steps.send(try_call(call[0], call[1], call[2], session))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def arun_pipeline(session: HookSession, policy: Policy, payload: str,
                        context: dict[str, Any],
                        stage: Callable[[str, str, dict[str, Any]], Awaitable[Answer]],
                        provider: Provider | None = None) -> PipelineResult:
    """`run_pipeline` with each stage answered by awaiting `stage(plugin_id, hook, data)`."""
    steps = pipeline_steps(session, policy, payload, context, provider)
    try:
        call = next(steps)
        while True:
            call = steps.send(await stage(*call))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def pipeline_steps(session: HookSession, policy: Policy, payload: str,
                   context: dict[str, Any], provider: Provider | None = None) -> Steps:
    """The pipeline's rules: yields each stage call, is sent its answer, returns the result."""
    result = PipelineResult({"payload": payload, "metadata": {}}, context)

    def stage_data(ref: StageRef | None) -> dict[str, Any]:
        return {"message": result.message, "context": result.context,
                "config": dict(ref.config) if ref else {}}

    def transform(kind: str, refs: tuple[StageRef, ...]) -> Generator[StageCall, Answer, None]:
        for ref in refs:
            answer, error = yield ref.id, kind, stage_data(ref)
            if error is None and answer is not None and answer.changed \
                    and not _message_ok(answer.value):
                error = f"{kind} stage answered no message.payload"
            if error is not None:
                if ref.mode == "required":
                    raise PipelineError(f"policy {policy.policy_id}: required {kind} stage "
                                        f"{ref.id} failed: {error}", plugin_id=ref.id,
                                        hook=kind)
                result.skipped.append(ref.id)
                continue
            if answer is not None and answer.changed:
                result.message = dict(answer.value["message"])
                if isinstance(answer.value.get("context"), dict):
                    result.context = dict(answer.value["context"])

    if policy.pre:  # a phase with no stages makes no generator
        yield from transform("pre", policy.pre)
    for ref in policy.validators:
        answer, error = yield ref.id, "validator", stage_data(ref)
        verdict = answer.value if answer is not None and answer.changed else None
        if error is None and isinstance(verdict, dict) and verdict.get("status") == "ok":
            continue
        if error is not None:
            reason = f"{ref.id}: {clean(error, MAX_REASON)}"  # a fault or timeout: reject
        elif isinstance(verdict, dict) and verdict.get("status") == "reject":
            # The validator's own words: one inert, bounded line wherever they go (the
            # log, the trace, the PipelineError, the result's warnings).
            said = verdict.get("reason")
            reason = f"{ref.id}: " + (clean(said, MAX_REASON) if isinstance(said, str) and said
                                      else "rejected")
        else:
            reason = f"{ref.id}: invalid verdict"
        if ref.on_fail == "block":
            result.blocked, result.reason = True, reason
            session.trace.note("validator", "block", reason, ref.id)
            raise PipelineError(f"policy {policy.policy_id} blocked by {reason}",
                                plugin_id=ref.id, hook="validator")
        if ref.on_fail == "warn":
            log.warning("policy %s: validator %s", policy.policy_id, reason)
            result.warnings.append(reason)
    if policy.providers or provider is not None:  # else nothing to ask (nor to build)
        yield from _provide(policy, result, stage_data(None), provider)
    if policy.post:
        yield from transform("post", policy.post)
    return result


_order_rng = random.SystemRandom()


def provider_order(providers: tuple[ProviderRef, ...],
                   rng: random.Random = _order_rng) -> list[ProviderRef]:
    """The order a run tries `providers` in: by priority; within one, in list order, or
    weighted at random when any has a weight (Efraimidis-Spirakis: each goes first
    with a chance in proportion to its weight)."""
    out: list[ProviderRef] = []
    for priority in sorted({p.priority for p in providers}):
        group = [p for p in providers if p.priority == priority]
        if any(p.weight is not None for p in group):
            group.sort(key=lambda p: rng.random() ** (1.0 / (p.weight or 1.0)), reverse=True)
        out.extend(group)
    return out


def _provide(policy: Policy, result: PipelineResult, data: dict[str, Any],
             provider: Provider | None) -> Generator[StageCall, Answer, None]:
    errors = []
    for ref in provider_order(policy.providers):
        pid = ref.id
        answer, error = yield pid, "provider", {**data, "config": dict(ref.parameters)}
        if error is None and answer is not None and answer.changed \
                and _message_ok(answer.value):
            result.message, result.provider = dict(answer.value["message"]), pid
            return
        errors.append(f"{pid}: {error or 'no message'}")
    if provider is not None:
        result.message, result.provider = provider(data), "app"
        return
    if errors:
        raise PipelineError(f"policy {policy.policy_id}: every provider failed "
                            f"({'; '.join(errors)})")
