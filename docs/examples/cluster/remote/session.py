"""Play the example session round after round in ONE session, every plugin remote.

    python session.py --nats nats://127.0.0.1:4222 --config host.toml --rounds 30

The host has no plugin of its own: `[remote.ID]` in host.toml names each plugin the
workers serve (`wasmext.cluster.plugins.attach_remote`). After the first round it
prints `ready` on stderr (docs/cluster_remote_demo.py kills a worker then), and at the
end one JSON document on stdout: how many rounds answered exactly as the first one,
how many did not with no named fault to say why (none should), the named faults
(plugin, hook, reason) the plugins' failure policies met, the turns that failed, the
turn count turn-counter kept in the shared state against the turns it saw, the
answers each worker gave, and the session's trace id (null with tracing off).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import msgpack

from wasmext import Host, load_config
from wasmext._toml import parse_text
from wasmext.agent import Agent
from wasmext.cluster.link import NatsLink
from wasmext.cluster.plugins import RemotePlugin, attach_remote
from wasmext.cluster.routing import Router, parse_routing
from wasmext.errors import WasmextError
from wasmext.models import ReplayModel, load_transcript
from wasmext_cli.example import example_root


class Rounds(ReplayModel):
    """The transcript's turns again and again: turn n plays scripted turn n mod len."""

    def complete(self, messages: Any, tools: Any, turn: int, step: int) -> dict[str, Any]:
        return super().complete(messages, tools, turn % len(self.transcript.turns), step)


def summary(report: Any) -> dict[str, Any]:
    """What a turn's answer is, without the times and ids that differ every run."""
    return {"response": report.response, "aborted": report.aborted,
            "tools": [(c.get("tool"), c.get("status")) for c in report.tool_calls],
            "extensions": [(e.get("name"), e.get("status"), e.get("output"))
                           for e in report.extensions]}


def count(host: Host) -> int:
    """turn-counter's count in the shared state (0 before its first turn)."""
    txn = host.state_store().begin("turn-counter")
    try:
        raw = txn.get("turns", scope="plugin")
    finally:
        txn.rollback()
    return 0 if raw is None else int(msgpack.unpackb(raw))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nats", required=True)
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args()
    root = example_root()
    script = load_transcript(root / "transcript.json")
    router = Router(parse_routing(parse_text((root / "policy.toml").read_text(), kind="toml")))
    host = Host(load_config(args.config))
    link = NatsLink(args.nats, name="wasmext-session", auth=host.config.nats.with_env())
    proxies = attach_remote(host, link)
    for problem in host.load_errors:
        print(f"wasmext: {problem.describe()}", file=sys.stderr)
    host.llm.use(ReplayModel(script).chat, "replay")
    before = count(host)
    first: list[dict[str, Any]] | None = None
    same, unexplained, failed, named = 0, 0, [], []
    seen_faults = len(host.faults)
    with host.session() as session:
        trace_id = session.context.get("trace_id") if host.tracing is not None else None
        for rnd in range(args.rounds):
            agent = Agent(host, Rounds(script), system=script.system,
                          routing=lambda: router)
            answers, failed_before = [], len(failed)
            for i, turn in enumerate(script.turns):
                index = rnd * len(script.turns) + i
                try:
                    answers.append(summary(agent.run_turn(session, index, turn["user"])))
                except WasmextError as err:  # a fail-closed plugin failed: named
                    failed.append({"round": rnd, "turn": index, "error": err.describe()})
                    answers.append({"failed": err.reason})
            # A call no worker answered (its worker died holding it, after it had run
            # the caller's inner layers, say) is a named fault its failure policy met.
            faults = [{"round": rnd, "plugin": f.plugin_id, "hook": f.hook, "error": f.reason}
                      for f in host.faults[seen_faults:]]
            seen_faults = len(host.faults)
            named += faults
            if first is None:
                first = answers
                print("ready", file=sys.stderr, flush=True)
            same += answers == first
            unexplained += answers != first and not faults and len(failed) == failed_before
    by_worker: dict[str, int] = {}
    for proxy in proxies:
        assert isinstance(proxy, RemotePlugin)
        for name, n in proxy.by_worker.items():
            by_worker[name] = by_worker.get(name, 0) + n
    print(json.dumps({"rounds": args.rounds, "same_as_first": same,
                      "different_without_a_named_fault": unexplained, "named_faults": named,
                      "failed": failed,
                      "turns_counted": count(host) - before,
                      "counting_calls_answered": sum(p.answered for p in proxies
                                                     if p.id == "turn-counter"),
                      "retries": sum(p.retries for p in proxies),
                      "answers_by_worker": dict(sorted(by_worker.items())),
                      "trace_id": trace_id}))
    link.close()
    host.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
