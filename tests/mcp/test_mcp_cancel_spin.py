"""End to end through `wasmext mcp serve` (stdio) with the official Python SDK client: a
client that cancels a tool call of a plugin spinning in a loop (no host calls, no function
calls) gets the plugin interrupted at once, long before its own time-out; the call is
audited `cancelled`, and the plugin and the others answer the next calls."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import msgpack
import pytest
from interop_support import FINE, TIMEOUT, cli_args, cli_env, run, tool_wat, write_plugin
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from wasmext.testing import RESPONSE_AT, packed

TIMEOUT_MS = 20_000
SPIN_ABOVE = 1500  # request bytes: a longer request spins, a short one answers
_ANSWER = packed(RESPONSE_AT, len(msgpack.packb({"ok": True, "value": {"found": 1}})))
SPIN = tool_wat([{"name": "spin", "description": "Spins when asked with a long pad"}],
                body=f"(if (i32.gt_u (local.get $l) (i32.const {SPIN_ABOVE})) "
                     f"(then (loop $spin (br $spin)))) (i64.const {_ANSWER})")
PAD = "x" * (2 * SPIN_ABOVE)
INTERRUPTED = "plugin spin hook on_tool failed (cancelled"


def test_a_client_cancel_interrupts_a_spinning_plugin(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "spin", SPIN)
    write_plugin(plugins, "fine", FINE)
    config = tmp_path / "wasmext.toml"
    config.write_text(f"""
[host]
data_dir = "data"
[plugins]
workspace_dir = "plugins"
[plugin.spin]
limits = {{ timeout_ms = {TIMEOUT_MS}, fuel_per_call = 1000000000000000 }}
""")
    stderr = tmp_path / "serve.err"
    params = StdioServerParameters(command=cli_args()[0], cwd=str(tmp_path), env=cli_env(),
                                   args=[*cli_args("mcp", "serve", "--config",
                                                   str(config))[1:]])
    waited: list[float] = []

    async def main() -> None:
        with stderr.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy",
                              read_timeout_seconds=TIMEOUT) as client:
                started = anyio.Event()

                async def progress(value: float, total: float | None,
                                   message: str | None) -> None:
                    if message == "started":
                        started.set()

                async with anyio.create_task_group() as tg:
                    async def call() -> None:
                        await client.call_tool("spin__spin", {"pad": PAD},
                                               progress_callback=progress)
                        pytest.fail("the call was not cancelled")
                    tg.start_soon(call)
                    await started.wait()
                    await anyio.sleep(0.5)  # the guest spins by now
                    cancelled_at = time.monotonic()
                    tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled
                while INTERRUPTED not in stderr.read_text():
                    assert time.monotonic() - cancelled_at < TIMEOUT, stderr.read_text()
                    await anyio.sleep(0.05)
                waited.append(time.monotonic() - cancelled_at)
                fine = await client.call_tool("fine__lookup", {"q": "x"})
                assert not fine.is_error, fine.content
                again = await client.call_tool("spin__spin", {})  # a short request answers
                assert not again.is_error, again.content
                assert again.structured_content == {"found": 1}

    run(main, timeout=2 * TIMEOUT)
    assert waited[0] < TIMEOUT_MS / 1000 / 2, waited  # not its own 20 s time-out
    log = stderr.read_text()
    assert "tool='spin__spin' status=cancelled" in log, log
    assert "tool='spin__spin' status=ok" in log, log
