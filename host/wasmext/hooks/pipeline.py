"""Pipeline stages composed by a routing policy: pre, validators, provider, post.

    {"policy_id": "support",
     "pre": [{"id": "normalize-text", "mode": "required", "config": {...}}],
     "validators": [{"id": "guard", "on_fail": "block"}],
     "providers": ["echo-provider"],
     "post": [{"id": "pii-mask", "mode": "optional"}]}

`mode` (pre, post): a failing `required` stage fails the run (PipelineError),
an `optional` one is skipped. A validator answers {"status": "ok"} or
{"status": "reject", "reason"}; a fault or timeout counts as reject, and
`on_fail` decides: block (PipelineError, result.blocked), warn (logged,
carried on) or ignore. Providers are tried in order until one answers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wasmext._toml import ConfigTextError, parse_text, read_capped
from wasmext.errors import ConfigError, PipelineError

if TYPE_CHECKING:
    from wasmext.hooks.context import HookSession

__all__ = ["PipelineResult", "Policy", "StageRef", "load_policy", "parse_policy",
           "run_pipeline"]

log = logging.getLogger("wasmext.pipeline")
Provider = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class StageRef:
    id: str
    mode: str = "required"
    on_fail: str = "block"
    config: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Policy:
    policy_id: str
    pre: tuple[StageRef, ...] = ()
    validators: tuple[StageRef, ...] = ()
    providers: tuple[str, ...] = ()
    post: tuple[StageRef, ...] = ()


@dataclass
class PipelineResult:
    message: dict[str, Any]
    context: dict[str, Any]
    blocked: bool = False
    reason: str | None = None
    provider: str | None = None
    warnings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


# A plugin id, or a remote extension's (the reference's ids have underscores).
STAGE_ID_RE = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")
_STAGE_KEYS = {False: {"id", "mode", "config"}, True: {"id", "on_fail", "config"}}


def _stage(raw: Any, where: str, validator: bool) -> StageRef:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) \
            or not STAGE_ID_RE.match(raw["id"]):
        raise ConfigError(f"policy {where}: each stage needs an 'id' naming a plugin "
                          "or a registered extension")
    unknown = set(raw) - _STAGE_KEYS[validator]
    if unknown:  # a misspelt key (`on-fail`, `retry` here) would silently do nothing
        raise ConfigError(f"policy {where}: unknown key {sorted(unknown)[0]!r}")
    mode, on_fail = raw.get("mode", "required"), raw.get("on_fail", "block")
    if mode not in ("required", "optional"):
        raise ConfigError(f"policy {where}.mode: must be required or optional")
    if validator and on_fail not in ("block", "warn", "ignore"):
        raise ConfigError(f"policy {where}.on_fail: must be block, warn or ignore")
    config = raw.get("config", {})
    if not isinstance(config, dict):
        raise ConfigError(f"policy {where}.config: must be a map")
    return StageRef(raw["id"], mode, on_fail, config)


def parse_policy(raw: Mapping[str, Any]) -> Policy:
    unknown = set(raw) - {"policy_id", "pre", "validators", "providers", "post"}
    if unknown:
        raise ConfigError(f"policy: unknown field {sorted(unknown)[0]!r}")
    pid = raw.get("policy_id", "default")
    if not isinstance(pid, str):
        raise ConfigError("policy.policy_id: must be a string")
    lists = {}
    for key in ("pre", "validators", "post"):
        items = raw.get(key, [])
        if not isinstance(items, list):
            raise ConfigError(f"policy.{key}: must be an array")
        lists[key] = tuple(_stage(x, f"{key}[{i}]", key == "validators")
                           for i, x in enumerate(items))
    providers = raw.get("providers", [])
    if not isinstance(providers, list) or not all(isinstance(p, str) for p in providers):
        raise ConfigError("policy.providers: must be an array of plugin ids")
    return Policy(pid, lists["pre"], lists["validators"], tuple(providers), lists["post"])


def load_policy(path: Path) -> Policy:
    """A policy from a .json or .toml file."""
    try:
        raw = parse_text(read_capped(path), kind="json" if path.suffix == ".json" else "toml")
    except (OSError, ConfigTextError) as exc:  # size and nesting caps: see _toml
        raise ConfigError(f"{path}: cannot read policy: {exc}") from exc
    return parse_policy(raw)


def _message_ok(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("message"), dict) \
        and isinstance(value["message"].get("payload"), str)


def run_pipeline(session: HookSession, policy: Policy, payload: str, context: dict[str, Any],
                 provider: Provider | None = None) -> PipelineResult:
    host = session.host
    result = PipelineResult({"payload": payload, "metadata": {}}, context)

    def stage_data(ref: StageRef | None) -> dict[str, Any]:
        return {"message": result.message, "context": result.context,
                "config": dict(ref.config) if ref else {}}

    def transform(kind: str, refs: tuple[StageRef, ...]) -> None:
        for ref in refs:
            answer, error = host.try_call(ref.id, kind, stage_data(ref), session)
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

    transform("pre", policy.pre)
    for ref in policy.validators:
        answer, error = host.try_call(ref.id, "validator", stage_data(ref), session)
        verdict = answer.value if answer is not None and answer.changed else None
        if error is None and isinstance(verdict, dict) and verdict.get("status") == "ok":
            continue
        if error is not None:
            reason = f"{ref.id}: {error}"  # a fault or timeout counts as reject
        elif isinstance(verdict, dict) and verdict.get("status") == "reject":
            reason = f"{ref.id}: {verdict.get('reason') or 'rejected'}"
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
    _provide(session, policy, result, stage_data(None), provider)
    transform("post", policy.post)
    return result


def _provide(session: HookSession, policy: Policy, result: PipelineResult, data: dict[str, Any],
             provider: Provider | None) -> None:
    errors = []
    for pid in policy.providers:
        answer, error = session.host.try_call(pid, "provider", data, session)
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
