"""One host process doing CAS increments through a real guest (run by test_state_faults).

    python fault_child.py <backend> <server url or -> <data dir> <session> <count>

prints one JSON line: the final count it saw and how its calls ended.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgpack

from wasmext import HostConfig, PluginError, StateUnavailable
from wasmext.testing import guest_wat, make_host

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
# The request is {"hook": "test", "data": <bin8 request>, ...}: the guest sends the bytes
# at offset 18 (length at 17) as its host_call and answers with the host's answer.
FORWARD = guest_wat("(call $host_call (i32.add (local.get $p) (i32.const 18))"
                    " (i32.load8_u (i32.add (local.get $p) (i32.const 17))))",
                    imports=HOST_CALL, hooks=("test",))


def host(backend: str, where: str, data_dir: str, **limits: int) -> Any:
    """A host with the forwarding plugin; `where` is the server's url (redis, jetstream)."""
    config = HostConfig(data_dir=Path(data_dir), state_backend=backend,
                        state_url=where if backend in ("redis", "jetstream") else None)
    return make_host((FORWARD, {"plugin_id": "counter", "grants": {"state"},
                                "limits": limits or None}), config=config)


def op(h: Any, session: str, **request: Any) -> Any:
    """One hook call whose guest makes the state request `request`."""
    raw = msgpack.packb(request)
    assert len(raw) < 256
    return h.plugins["counter"].plugin.call("test", raw, {"session": session}).value


def increment(h: Any, session: str, tally: dict[str, int]) -> None:
    """Read, then compare-and-set +1; retried until it lands."""
    while True:
        try:
            try:
                n = op(h, session, op="state.get", key="n")
            except PluginError as err:
                if err.code != "not_found":
                    raise
                n = None
            if n is None:
                op(h, session, op="state.cas", key="n", value=1)
            else:
                op(h, session, op="state.cas", key="n", expected=n, value=n + 1)
            return
        except PluginError as err:
            tally[f"error:{err.code}"] = tally.get(f"error:{err.code}", 0) + 1
            if err.code != "conflict":
                raise
        except StateUnavailable as err:
            kind = "gave_up" if "conflicting commits" in err.message else "unavailable"
            tally[kind] = tally.get(kind, 0) + 1
            print(f"unavailable: {err.message}", file=sys.stderr)


def main() -> None:
    backend, where, data_dir, session = sys.argv[1:5]
    count = int(sys.argv[5])
    h = host(backend, where, data_dir)
    tally: dict[str, int] = {}
    for _ in range(count):
        increment(h, session, tally)
    plugin = h.plugins["counter"].plugin
    print(json.dumps({"count": op(h, session, op="state.get", key="n"), "tally": tally,
                      "faults": plugin.faults, "quarantined": plugin.quarantined,
                      "host_faults": len(h.faults)}))
    h.close()


if __name__ == "__main__":
    main()
