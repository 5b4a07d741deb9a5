"""Run a routing policy whose stages are NATS services (docs/cluster.md).

    python docs/cluster_call.py --nats URL --registry R.toml --policy P.json [--tenant T]
                                [--count N] TEXT...

Prints one JSON line per TEXT (`blocked`, `reason`, `payload`), then one line of
per-extension stats: which worker answered how many calls.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from wasmext import Host, HostConfig, PipelineError
from wasmext._toml import parse_text
from wasmext.cluster.link import NatsLink
from wasmext.cluster.registry import load_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router, parse_routing


def main() -> None:
    args = argparse.ArgumentParser()
    args.add_argument("--nats", default="nats://127.0.0.1:4222")
    args.add_argument("--registry", type=Path, required=True)
    args.add_argument("--policy", type=Path, required=True)
    args.add_argument("--tenant", default="default")
    args.add_argument("--count", type=int, default=1, help="Run each text this many times.")
    args.add_argument("texts", nargs="+")
    opts = args.parse_args()
    routing = parse_routing(parse_text(opts.policy.read_bytes(), kind="json"))
    with NatsLink(opts.nats) as link, Host(HostConfig(), plugin_dirs=[]) as host:
        caller = RemoteCaller(load_registry(opts.registry), link)
        router = Router(routing, caller)
        for text in opts.texts:
            for _ in range(opts.count):
                with host.session() as s:
                    try:
                        result = router.run(s, text, tenant_id=opts.tenant,
                                            provider=lambda data: data["message"])
                        line = {"blocked": False, "payload": result.message["payload"]}
                    except PipelineError as err:
                        line = {"blocked": True, "reason": err.message}
            print(json.dumps({"text": text, **line}))
        print(json.dumps({ext: {"ok": st.ok, "failed": st.failed, "by_worker": st.by_worker}
                          for ext, st in caller.stats.items()}))


if __name__ == "__main__":
    main()
