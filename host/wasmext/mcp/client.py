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
import re
import threading
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from wasmext.errors import ConfigError
from wasmext.mcp.config import McpServerConfig
from wasmext.mcp.content import from_mcp
from wasmext.sandbox import calltree
from wasmext.services.tools import Runner, Tool, ToolRegistry, compile_schema

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

__all__ = ["McpClients", "McpToolError", "ServerSpec", "build_tool", "tool_name"]

log = logging.getLogger("wasmext.mcp")

TRANSPORTS = ("stdio", "sse", "http")
SERVER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 30.0
PING_INTERVAL_S = 5.0
STOP_TIMEOUT_S = 10.0
MAX_DESCRIPTION = 1024
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class McpToolError(RuntimeError):
    """A tool result the MCP server marked as an error; the message is its text."""


@dataclass(frozen=True)
class ServerSpec(McpServerConfig):
    """One MCP server (values already ${VAR}-substituted), checked on creation."""

    def __post_init__(self) -> None:
        for bad, why in [
                (not SERVER_ID_RE.match(self.name), "name: letters, digits, '_' and '-'"),
                (self.transport not in TRANSPORTS, f"transport must be one of {TRANSPORTS}"),
                (self.transport == "stdio" and not self.command, "stdio needs a command"),
                (self.transport != "stdio" and not self.url, f"{self.transport} needs a url"),
                (min(self.connect_timeout_s, self.call_timeout_s) <= 0, "timeouts must be > 0")]:
            if bad:
                raise ConfigError(f"mcp server {self.name!r}: {why}")
        object.__setattr__(self, "args", tuple(self.args))

    @classmethod
    def from_config(cls, cfg: Any) -> ServerSpec:
        """From any object with the same fields (e.g. config.McpServerConfig)."""
        return cls(cfg.name, cfg.transport, cfg.command, tuple(cfg.args), dict(cfg.env),
                   cfg.url, float(cfg.connect_timeout_s), float(cfg.call_timeout_s),
                   bool(cfg.enabled))


def tool_name(server: str, tool: str) -> str:
    """The registry name of an MCP tool: `{server}__{tool}`, sanitized, at most 64."""
    return _UNSAFE.sub("_", f"{server}__{tool}")[:64]


def build_tool(server: str, name: Any, description: Any, input_schema: Any,
               run: Runner, output_schema: Any = None) -> Tool | None:
    """A registry Tool for one listed MCP tool, or None (logged) when it is unusable.

    A schema is kept as is (and compiled once, like every tool's) when it is a
    dict that compiles; anything else skips the tool (an unusable output
    schema is only dropped).
    """
    where = f"mcp server {server}: tool {name!r}"
    if not isinstance(name, str) or not name:
        log.warning("%s skipped: the name must be a non-empty string", where)
        return None
    try:
        validator = _compiled(input_schema)
    except ConfigError as err:
        log.warning("%s skipped: input schema %s", where, err.message)
        return None
    if output_schema is not None:
        try:
            _compiled(output_schema)
        except ConfigError as err:
            log.info("%s: output schema ignored (%s)", where, err.message)
            output_schema = None
    text = _CONTROL.sub(" ", description if isinstance(description, str) else "")
    return Tool(tool_name(server, name), text[:MAX_DESCRIPTION], input_schema,
                f"mcp:{server}", run, output_schema, validator)


def _compiled(schema: Any) -> Any:
    if not isinstance(schema, dict):
        raise ConfigError(f"is not a JSON object ({type(schema).__name__})")
    return compile_schema(schema, "schema")


def _reason(exc: BaseException) -> str:
    while getattr(exc, "exceptions", None):  # an exception group: its first leaf
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    text = str(exc) or type(exc).__name__
    return _CONTROL.sub(" ", text)[:300]


def _result_output(server: str, result: Any) -> Any:
    """Text only: the structured content, else the text; any other block: the content
    shape of `wasmext.mcp.content` (images, audio and resources carried, not dropped)."""
    blocks = list(result.content or [])
    text = "\n".join(getattr(c, "text", "") for c in blocks
                     if getattr(c, "type", None) == "text")
    if result.is_error:
        raise McpToolError(text or f"mcp server {server}: the tool reported an error")
    if all(getattr(c, "type", None) == "text" for c in blocks):
        return result.structured_content if result.structured_content is not None else text
    try:
        shaped: dict[str, Any] = {"content": from_mcp(blocks)}
    except ValueError as exc:
        raise McpToolError(f"mcp server {server}: {exc}") from None
    if result.structured_content is not None:
        shaped["structured"] = result.structured_content
    return shaped


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
        self._servers: dict[str, _Server] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False

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
            log.warning("mcp: shutdown incomplete: %s", _reason(exc))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5.0)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None
        for st in self._servers.values():
            self.registry.drop_owner(f"mcp:{st.spec.name}")
            st.tools = []
            st.status = "disabled" if not st.spec.enabled else "unavailable: stopped"

    def __enter__(self) -> McpClients:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def status(self, name: str) -> str:
        st = self._servers.get(name)
        if st is None:
            raise KeyError(f"no mcp server {name!r}")
        return st.status

    def servers(self) -> list[dict[str, Any]]:
        """For `wasmext mcp ls`: name, transport, status and tool names of each server."""
        return [{"name": st.spec.name, "transport": st.spec.transport, "status": st.status,
                 "tools": list(st.tools)} for st in self._servers.values()]

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
                st.lost = st.lost or _reason(exc)
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
        st.session = None
        st.tools = []
        st.status = f"unavailable: {reason}"

    async def _connect_once(self, st: _Server) -> bool:
        """One connection, held until it ends; True when it got as far as connected."""
        from mcp.client.session import ClientSession

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
            session = await stack.enter_async_context(ClientSession(recv, write))
            with anyio.fail_after(spec.connect_timeout_s):
                await session.initialize()
                listed = await self._list_tools(session)
            if self._stopping or wake.is_set():
                return False
            self._register(st, listed)
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
                        st.lost = f"ping failed: {_reason(exc)}"
                        wake.set()
                    continue
                if st.lost is not None or self._stopping:
                    break
                wake.clear()
            # Drop the tools now, not after the (bounded) transport teardown.
            self._forget(st, st.lost or "stopped")
            return True

    @staticmethod
    def _transport(spec: ServerSpec) -> Any:
        from mcp.client.sse import sse_client
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        if spec.transport == "stdio":
            return stdio_client(StdioServerParameters(
                command=str(spec.command), args=list(spec.args), env=dict(spec.env) or None))
        if spec.transport == "sse":
            return sse_client(str(spec.url), timeout=spec.connect_timeout_s)
        return streamable_http_client(str(spec.url))

    @staticmethod
    async def _list_tools(session: ClientSession) -> list[Any]:
        from mcp_types import PaginatedRequestParams

        tools: list[Any] = []
        page = await session.list_tools()
        for _ in range(100):  # a bounded number of pages
            tools.extend(page.tools)
            if not page.next_cursor:
                break
            page = await session.list_tools(params=PaginatedRequestParams(cursor=page.next_cursor))
        return tools

    def _register(self, st: _Server, listed: list[Any]) -> None:
        self.registry.drop_owner(f"mcp:{st.spec.name}")
        names: list[str] = []
        for item in listed:
            short = getattr(item, "name", None)
            tool = build_tool(st.spec.name, short, getattr(item, "description", None),
                              getattr(item, "input_schema", None), self._runner(st, str(short)),
                              getattr(item, "output_schema", None))
            try:
                if tool is not None and tool.name in names:
                    raise ConfigError(f"its name {tool.name} is taken")
                if tool is not None:
                    self.registry.add(tool)
                    names.append(tool.name)
            except ConfigError as err:
                log.warning("mcp server %s: tool %r skipped: %s", st.spec.name, short,
                            err.message)
        st.tools = names

    def _runner(self, st: _Server, short: str) -> Runner:
        spec = st.spec

        def run(args: dict[str, Any], session: Any) -> Any:
            loop, client = self._loop, st.session
            if loop is None or client is None:
                raise RuntimeError(f"mcp server {spec.name} is {st.status}")
            # Called by a plugin: no longer than what is left of its call tree's time.
            left = calltree.remaining()
            wait = spec.call_timeout_s if left is None else min(spec.call_timeout_s, left)
            if wait <= 0:
                raise calltree.OutOfTime("the calling plugin's time is up")
            future = asyncio.run_coroutine_threadsafe(client.call_tool(short, dict(args)), loop)
            try:
                result = future.result(timeout=wait)
            except concurrent.futures.TimeoutError:
                future.cancel()
                if wait < spec.call_timeout_s:
                    raise calltree.OutOfTime(f"mcp server {spec.name}: tool {short!r} did not "
                                             f"answer within the {wait * 1000:.0f} ms the "
                                             "caller had left") from None
                raise TimeoutError(f"mcp server {spec.name}: tool {short!r} did not answer "
                                   f"within {spec.call_timeout_s:g} s") from None
            return _result_output(spec.name, result)
        return run
