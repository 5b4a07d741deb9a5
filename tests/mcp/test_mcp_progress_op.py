"""The `progress` op (ABI minor 1): a plugin's own progress reaches the MCP client."""

from __future__ import annotations

import time
from pathlib import Path

import msgpack
from interop_support import TIMEOUT, run
from mcp.client.client import Client

from wasmext import HostConfig
from wasmext.mcp.server.serve import McpToolServer
from wasmext.services.progress import MAX_PROGRESS_MESSAGE
from wasmext.testing import DATA_AT, RESPONSE_AT, guest_wat, make_host, packed

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
ANSWER = {"ok": True, "value": {"found": 1}}


def reporting(requests: list[dict[str, object]], repeat: int = 1) -> str:
    """A tool plugin whose on_tool makes each host call `repeat` times, then answers."""
    blobs = [msgpack.packb({"op": "progress", **r}) for r in requests]
    calls, offset = [], DATA_AT
    for blob in blobs:
        calls.append(f"(drop (call $host_call (i32.const {offset}) (i32.const {len(blob)})))")
        offset += len(blob)
    body = f"""(local $i i32)
      (loop $again
        {' '.join(calls)}
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $again (i32.lt_u (local.get $i) (i32.const {repeat}))))
      (i64.const {packed(RESPONSE_AT, len(msgpack.packb(ANSWER)))})"""
    return guest_wat(body, imports=HOST_CALL, data=b"".join(blobs), response=ANSWER,
                     registration={"hooks": [{"hook": "on_tool"}], "tools": [{"name": "go"}],
                                   "abi_minor": 1})  # `progress` is a minor-1 op


def test_plugin_progress_reaches_the_client(tmp_path: Path) -> None:
    wat = reporting([{"progress": 1, "total": 3, "message": "one\x1b[31m" + "x" * 10_000},
                     {"progress": 1, "total": 3, "message": "again"},  # not increasing
                     {"progress": -1},  # invalid: an op error, the call goes on
                     {"progress": 2, "total": 3, "message": "two"}])
    with make_host((wat, {"plugin_id": "rep"}),
                   config=HostConfig(data_dir=tmp_path / ".wasmext")) as host:
        server = McpToolServer(host, poll_interval=0)
        seen: list[tuple[float, float | None, str | None]] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            seen.append((value, total, message))

        async def main() -> None:
            async with Client(server.server, mode="legacy",
                              read_timeout_seconds=TIMEOUT) as client:
                result = await client.call_tool("rep__go", {}, progress_callback=progress)
                assert not result.is_error, result.content

        run(main)
    values = [(v, t) for v, t, _m in seen]
    assert values == [(0.0, None), (1.0, 3.0), (2.0, 3.0)]
    first = seen[1][2] or ""
    assert "\x1b" not in first and len(first) <= MAX_PROGRESS_MESSAGE
    assert seen[2][2] == "two"


def test_progress_flood_is_bounded_by_host_calls(tmp_path: Path) -> None:
    flood = reporting([{"progress": 1, "message": "spam"}], repeat=100_000)
    fine = guest_wat(response=ANSWER, registration={"hooks": [{"hook": "on_tool"}],
                                                    "tools": [{"name": "ok"}]})
    with make_host((flood, {"plugin_id": "flood"}), (fine, {"plugin_id": "fine"}),
                   config=HostConfig(data_dir=tmp_path / ".wasmext")) as host:
        started = time.monotonic()
        result = host.tools.execute("flood__go", {})
        assert time.monotonic() - started < TIMEOUT
        assert result["status"] == "error" and result["error"]["code"] == "host call limit", \
            result
        assert host.tools.execute("fine__ok", {})["status"] == "ok"
