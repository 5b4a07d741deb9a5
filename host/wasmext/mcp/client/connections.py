"""MCP client: the tools of external MCP servers join the host's tool registry.

    clients = McpClients(host.tools)
    clients.start([ServerSpec("calc", "stdio", command="python", args=("calc.py",))])
    host.tools.call("calc__add", {"a": 1, "b": 2})
    clients.stop()

One asyncio loop in a daemon thread runs a supervisor task per enabled server:
it connects (stdio, SSE or streamable HTTP via the official `mcp` SDK), lists
the tools and registers each as `{server}__{tool}`, owner `mcp:{server}`. When
the connection ends (crash, exit, failed ping) the tools are dropped, the server
reads as unavailable and it reconnects with backoff (0.5 s doubling to 30 s).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AsyncExitStack, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from wasmext.errors import ConfigError
from wasmext.mcp.client.callbacks import client_callbacks
from wasmext.mcp.client.catalog import (
    MAX_LISTED,
    UpstreamCatalog,
    list_kind,
    list_tools,
    trace_meta,
)
from wasmext.mcp.client.spec import ServerSpec
from wasmext.mcp.client.tools import McpToolError, build_tool, reason, result_output
from wasmext.mcp.client.transport import http_transport
from wasmext.observe import tracing
from wasmext.sandbox import callscope, calltree
from wasmext.services.tools import Runner, ToolRegistry
from wasmext.text import clean

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

__all__ = ["McpClients"]

log = logging.getLogger("wasmext.mcp")
T = TypeVar("T")

BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 30.0
PING_INTERVAL_S = 5.0
STOP_TIMEOUT_S = 10.0


class _Server:  # one server's state, written on the loop thread
    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.status = "disabled" if not spec.enabled else "connecting"
        self.session: ClientSession | None = None
        self.tools: list[str] = []
        self.task: asyncio.Task[None] | None = None
        self.wake: asyncio.Event | None = None  # set on disconnect or stop
        self.lost: str | None = None
        self.first_attempt = threading.Event()


class McpClients:
    """Connections to MCP servers, their tools kept in `registry`."""

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry
        # The host's model for servers configured with `sampling = true`:
        # sampler(server, CreateMessageRequestParams) -> CreateMessageResult (any thread).
        self.sampler: Callable[[str, Any], Any] | None = None
        # OAuth (servers with an `oauth` table): token files, and who shows the operator
        # where to authorize: prompt(server, address, callback); None prints to stderr.
        self.oauth_dir = Path(".wasmext") / "mcp-oauth"
        self.authorize_prompt: Callable[[str, str, str], None] | None = None
        self._servers: dict[str, _Server] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.catalog = UpstreamCatalog(self)  # their resources and prompts

    def start(self, specs: Sequence[ServerSpec], wait_s: float | None = None) -> None:
        """Connect every enabled server concurrently; wait for each first attempt.

        `wait_s` bounds the wait (default: the largest connect timeout + 5 s).
        """
        loop = self._ensure_loop()
        new: list[_Server] = []
        with self._lock:
            for spec in specs:
                old = self._servers.get(spec.name)
                if old is not None and old.task is not None and not old.task.done():
                    raise ConfigError(f"mcp server {spec.name!r} is already started")
                st = _Server(spec)
                self._servers[spec.name] = st
                if spec.enabled:
                    new.append(st)
        for st in new:
            asyncio.run_coroutine_threadsafe(self._spawn(st), loop).result()
        limit = wait_s if wait_s is not None else max(
            [st.spec.connect_timeout_s for st in new], default=0.0) + 5.0
        deadline = time.monotonic() + limit
        for st in new:
            st.first_attempt.wait(max(0.0, deadline - time.monotonic()))

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Close every session and server process (bounded by `timeout_s`)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._stopping = True
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(timeout_s), loop).result(
                timeout_s + 5.0)
        except Exception as exc:  # never let stop() hang or raise
            log.warning("mcp: shutdown incomplete: %s", reason(exc))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5.0)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None
        for st in self._servers.values():
            self.registry.drop_owner(f"mcp:{st.spec.name}")
            st.tools = []
            st.status = "disabled" if not st.spec.enabled else "unavailable: stopped"

    def stop_server(self, name: str, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """Stop one server (a disabled plugin's) and drop its tools; True if it was known."""
        with self._lock:
            st = self._servers.pop(name, None)
        loop, task = self._loop, st.task if st is not None else None
        if loop is not None and task is not None and not task.done():
            async def cancel() -> None:  # the SDK's shielded teardown reaps the process
                task.cancel()
                await asyncio.wait({task}, timeout=timeout_s)
            with suppress(Exception):  # bounded, and never raises
                asyncio.run_coroutine_threadsafe(cancel(), loop).result(timeout_s + 5.0)
        self.registry.drop_owner(f"mcp:{name}")
        return st is not None

    def __enter__(self) -> McpClients:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def status(self, name: str) -> str:
        """The server's status: connected, connecting, disabled or unavailable: why."""
        st = self._servers.get(name)
        if st is None:
            raise KeyError(f"no mcp server {name!r}")
        return st.status

    def servers(self) -> list[dict[str, Any]]:
        """For `wasmext mcp ls`: name, transport, status and tool names of each server."""
        return [{"name": st.spec.name, "transport": st.spec.transport, "status": st.status,
                 "tools": list(st.tools)} for st in self._servers.values()]

    def request(self, server: str, make: Callable[[ClientSession], Coroutine[Any, Any, T]]
                ) -> T:
        """Run `make(session)` on server's connection (any thread), within its call timeout
        and what is left of a calling plugin's time; KeyError for an unknown server."""
        st = self._servers[server]
        loop, session = self._loop, st.session
        if loop is None or session is None:
            raise RuntimeError(f"mcp server {server} is {st.status}")
        left = calltree.remaining()
        wait = st.spec.call_timeout_s if left is None else min(st.spec.call_timeout_s, left)
        if wait <= 0:
            raise calltree.OutOfTime("the calling plugin's time is up")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(make(session),
                                                                                  loop)
        try:
            return future.result(timeout=wait)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"mcp server {server} did not answer within "
                               f"{wait * 1000:.0f} ms") from None

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is not None:
            return self._loop
        loop = asyncio.new_event_loop()  # work queued before it runs waits for it
        self._thread = threading.Thread(target=loop.run_forever, name="wasmext-mcp",
                                        daemon=True)
        self._thread.start()
        self._loop = loop
        self._stopping = False
        return loop

    async def _spawn(self, st: _Server) -> None:
        st.wake = asyncio.Event()
        st.task = asyncio.get_running_loop().create_task(self._supervise(st))

    async def _shutdown(self, timeout_s: float) -> None:
        for st in self._servers.values():
            if st.wake is not None:
                st.wake.set()
        pending = {st.task for st in self._servers.values() if st.task and not st.task.done()}
        if pending:
            _, pending = await asyncio.wait(pending, timeout=timeout_s)
        for task in pending:  # cancelled: the SDK's shielded teardown still reaps processes
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=3.0)

    async def _supervise(self, st: _Server) -> None:
        backoff = BACKOFF_START_S
        assert st.wake is not None
        while not self._stopping:
            st.status = "connecting"
            st.lost = None
            connected = False
            try:
                connected = await self._connect_once(st)
            except Exception as exc:
                st.lost = st.lost or reason(exc)
            finally:
                self._forget(st, st.lost or "connection closed")
                st.first_attempt.set()
            if self._stopping:
                break
            log.warning("mcp server %s unavailable: %s", st.spec.name, st.status[13:])
            backoff = BACKOFF_START_S if connected else backoff
            st.wake.clear()
            with suppress(asyncio.TimeoutError):
                await asyncio.wait_for(st.wake.wait(), backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    def _forget(self, st: _Server, reason: str) -> None:
        self.registry.drop_owner(f"mcp:{st.spec.name}")
        self.catalog.forget(st.spec.name)
        st.session = None
        st.tools = []
        st.status = f"unavailable: {reason}"

    async def _connect_once(self, st: _Server) -> bool:
        """One connection, held until it ends; True when it got as far as connected."""
        from mcp.client.session import ClientSession
        from mcp_types import ToolListChangedNotification

        spec = st.spec
        assert st.wake is not None
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport(spec))
            send, recv = anyio.create_memory_object_stream[Any](0)
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)
            wake = st.wake

            async def forward() -> None:
                # Between the transport and the session: sees the connection end.
                try:
                    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        async with send:
                            async for item in read:
                                await send.send(item)
                finally:
                    st.lost = st.lost or "connection closed"
                    wake.set()

            tg.start_soon(forward)
            async def on_message(message: Any) -> None:
                # Re-list in a task: the handler must not await the session's own I/O.
                if isinstance(message, ToolListChangedNotification) and st.session is not None:
                    tg.start_soon(self._relist, st)
                elif (kind := list_kind(message)) and st.session is not None:
                    tg.start_soon(self.catalog.changed(spec.name, kind, st.session))

            session = await stack.enter_async_context(ClientSession(
                recv, write, message_handler=on_message, **client_callbacks(self, spec)))
            with anyio.fail_after(spec.connect_timeout_s):
                await session.initialize()
                listed = await list_tools(session)
            if self._stopping or wake.is_set():
                return False
            self._register(st, listed)
            self.catalog.adopt(spec.name, session, spec.connect_timeout_s)
            st.session = session
            st.status = "connected"
            st.first_attempt.set()
            while not self._stopping:
                try:
                    await asyncio.wait_for(wake.wait(), PING_INTERVAL_S)
                except asyncio.TimeoutError:
                    try:
                        with anyio.fail_after(spec.connect_timeout_s):
                            await session.send_ping()
                    except Exception as exc:
                        st.lost = f"ping failed: {reason(exc)}"
                        wake.set()
                    continue
                if st.lost is not None or self._stopping:
                    break
                wake.clear()
            # Drop the tools now, not after the (bounded) transport teardown.
            self._forget(st, st.lost or "stopped")
            return True

    def _transport(self, spec: ServerSpec) -> Any:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        if spec.transport == "stdio":
            # 002's rule: the host's environment, the table's `env` over it. Without
            # `inherit_env` (always so for a plugin's own servers) the SDK starts from
            # its minimal set (PATH, HOME, ...) and adds only `env`.
            env = {**os.environ, **spec.env} if spec.inherit_env else dict(spec.env)
            return stdio_client(StdioServerParameters(
                command=str(spec.command), args=list(spec.args), env=env or None,
                cwd=spec.cwd))
        return http_transport(spec, self.oauth_dir, self.authorize_prompt)

    async def _relist(self, st: _Server) -> None:
        """Follow notifications/tools/list_changed: list again, replace the server's tools."""
        session = st.session
        if session is None:
            return
        try:
            with anyio.fail_after(st.spec.connect_timeout_s):
                listed = await list_tools(session)
        except Exception as exc:
            log.warning("mcp server %s: re-listing tools failed: %s", st.spec.name, reason(exc))
            return
        if st.session is session:
            self._register(st, listed)
            log.info("mcp server %s: tool list changed (%d tools)", st.spec.name, len(st.tools))

    def _register(self, st: _Server, listed: list[Any]) -> None:
        self.registry.drop_owner(f"mcp:{st.spec.name}")
        if len(listed) > MAX_LISTED:
            # A server listing 100,000 tools held the connections' loop for minutes (each a
            # compiled schema), and again at every list_changed it sent.
            log.warning("mcp server %s lists more than %d tools; the first %d are kept",
                        st.spec.name, MAX_LISTED, MAX_LISTED)
            listed = listed[:MAX_LISTED]
        names: list[str] = []
        taken: set[str] = set()
        for item in listed:
            short = getattr(item, "name", None)
            tool = build_tool(st.spec.name, short, getattr(item, "description", None),
                              getattr(item, "input_schema", None), self._runner(st, str(short)),
                              getattr(item, "output_schema", None),
                              getattr(item, "title", None), getattr(item, "annotations", None))
            try:
                if tool is not None and tool.name in taken:
                    raise ConfigError(f"its name {tool.name} is taken")
                if tool is not None:
                    self.registry.add(tool)
                    names.append(tool.name)
                    taken.add(tool.name)
            except ConfigError as err:
                log.warning("mcp server %s: tool %s skipped: %s", st.spec.name,
                            clean(repr(short), 80), clean(err.message, 300))
        st.tools = names

    def _runner(self, st: _Server, short: str) -> Runner:
        spec = st.spec

        def run(args: dict[str, Any], session: Any) -> Any:
            # Called by a plugin: no longer than what is left of its call tree's time.
            left = calltree.remaining()
            wait = spec.call_timeout_s if left is None else min(spec.call_timeout_s, left)
            if wait <= 0:
                raise calltree.OutOfTime("the calling plugin's time is up")
            scope = callscope.current()
            if scope is not None and scope.cancelled.is_set():
                raise McpToolError(f"mcp server {spec.name}: tool {short!r}: cancelled")
            traced = tracing.ACTIVE
            if traced is None:
                return self._call_tool(st, short, args, wait, scope, None)
            with traced.span("wasmext.mcp tools/call", {
                    "wasmext.mcp_server": tracing.text(spec.name),
                    "wasmext.tool": tracing.text(short)}, kind="client"):
                # The server's spans may join this trace (`_meta`).
                return self._call_tool(st, short, args, wait, scope, trace_meta())
        return run

    def _call_tool(self, st: _Server, short: str, args: dict[str, Any], wait: float,
                   scope: callscope.CallScope | None, meta: dict[str, str] | None) -> Any:
        """One tools/call on `st`'s connection, at most `wait` seconds, cancelled with
        `scope`; `meta` goes out as the request's `_meta` (trace context)."""
        spec, loop, client = st.spec, self._loop, st.session
        if loop is None or client is None:
            raise RuntimeError(f"mcp server {spec.name} is {st.status}")

        async def progressed(progress: float, total: float | None,
                             message: str | None) -> None:
            if scope is not None:  # upstream progress, passed on to whoever asked
                await asyncio.to_thread(scope.report, progress, total, message)

        future = asyncio.run_coroutine_threadsafe(client.call_tool(
            short, dict(args), progress_callback=progressed if scope else None,
            meta=meta), loop)  # type: ignore[arg-type]
        # Cancelling the task makes the SDK send notifications/cancelled upstream.
        forget = scope.on_cancel(future.cancel) if scope is not None else (lambda: None)
        try:
            result = future.result(timeout=wait)
        except concurrent.futures.CancelledError:
            raise McpToolError(f"mcp server {spec.name}: tool {short!r}: cancelled"
                               ) from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            if wait < spec.call_timeout_s:
                raise calltree.OutOfTime(f"mcp server {spec.name}: tool {short!r} did not "
                                         f"answer within the {wait * 1000:.0f} ms the "
                                         "caller had left") from None
            raise TimeoutError(f"mcp server {spec.name}: tool {short!r} did not answer "
                               f"within {spec.call_timeout_s:g} s") from None
        finally:
            forget()
        return result_output(spec.name, result)
