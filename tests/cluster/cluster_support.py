"""The registry and policy the cluster tests share."""

from __future__ import annotations

from typing import Any

from wasmext.cluster.registry import RemoteExtension, parse_registry

W = "wasmext"
REGISTRY: dict[str, dict[str, Any]] = {
    "stamp": {"type": "pre", "subject": f"{W}.ext.pre.stamp.v1", "timeout_ms": 5000},
    "burn": {"type": "pre", "subject": f"{W}.ext.pre.burn.v1", "timeout_ms": 10000},
    "slow": {"type": "pre", "subject": f"{W}.ext.pre.slow.v1", "timeout_ms": 10000},
    "agent-guard": {"type": "validator", "subject": f"{W}.ext.validate.agent-guard.v0",
                    "timeout_ms": 5000},
    "answer": {"type": "provider", "subject": f"{W}.provider.answer.v1", "timeout_ms": 5000},
    "tail": {"type": "post", "subject": f"{W}.ext.post.tail.v1", "timeout_ms": 5000},
    # the foreign (nats-py only) extension
    "shout": {"type": "pre", "subject": f"{W}.ext.pre.shout.v1", "timeout_ms": 5000},
    "sleepy": {"type": "validator", "subject": f"{W}.ext.validate.sleepy.v1",
               "timeout_ms": 150},
    "flaky": {"type": "validator", "subject": f"{W}.ext.validate.flaky.v1", "timeout_ms": 1000,
              "retry": 1},
    "garbage": {"type": "validator", "subject": f"{W}.ext.validate.garbage.v1",
                "timeout_ms": 5000},
    "crm": {"type": "provider", "subject": f"{W}.provider.crm.v1", "timeout_ms": 5000},
}

POLICY: dict[str, Any] = {
    "policy_id": "support", "pre": [{"id": "stamp", "mode": "required"}],
    "validators": [{"id": "agent-guard", "on_fail": "block"}],
    "providers": ["answer"], "post": [{"id": "tail", "mode": "required"}]}


def registry(prefix: str = W, **changes: dict[str, Any]) -> dict[str, RemoteExtension]:
    """REGISTRY with `changes` per id ('-' spelt '_'), its subjects under `prefix`."""
    raw = {k: {**v, "subject": prefix + v["subject"][len(W):],
               **changes.get(k.replace("-", "_"), {})} for k, v in REGISTRY.items()}
    return parse_registry(raw)
