"""Serve a Host's tools over MCP (the official `mcp` SDK, low-level server).

    server = McpToolServer(host)            # plugin tools; include_host_tools=True adds host tools
    serve_stdio(host)                       # or: serve_http(host, host="127.0.0.1", port=8765)

Every tool in `host.tools` owned by a plugin (and, when asked, by the host) is
listed; a call runs `host.tools.call` inside a fresh host session on a worker
thread, so the registry validates the arguments before any plugin sees them.
A failed call (invalid arguments, a trap, a refusal, the rate limit) is an MCP
tool result with `isError: true`, never a protocol error. When the tools,
resources or prompts served change, `notifications/{tools,resources,prompts}/
list_changed` goes out for that list (`served_changes`): at once from
`notify_changed()`, or when its fingerprint differs from the last one seen
(checked before each request and by a background poll).
With `manage` (the operator's [manage] settings, `--manage`), the management
tools of `mcp.server.manage` are served too (list, grants, enable, disable, load).
Each call writes one line on the `wasmext.mcp.audit` logger: client, tool,
status, duration, never the arguments.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import ListenHandler

from wasmext.errors import ManageRefused, WasmextError
from wasmext.mcp.server.auth import BearerAuth, rebinding_guard, require_token_for
from wasmext.mcp.server.changes import ListChanges, fingerprint
from wasmext.mcp.server.handlers import ServedCatalog
from wasmext.mcp.server.hints import HintTrust
from wasmext.mcp.server.manage import Manager, without_paths
from wasmext.mcp.server.results import error_code, error_result, tool_result
from wasmext.observe import tracing
from wasmext.sandbox.callscope import CallScope
from wasmext.text import DESCRIPTION_CAP, clean, clean_lines

if TYPE_CHECKING:
    import uvicorn
    from mcp.server.context import ServerRequestContext

    from wasmext.config import ManageSettings
    from wasmext.host import Host
    from wasmext.services.tools import Tool

__all__ = ["McpToolServer", "RateLimiter", "build_http_server", "serve_http", "serve_stdio"]

log = logging.getLogger("wasmext.mcp")
audit = logging.getLogger("wasmext.mcp.audit")


class RateLimiter:
    """A token bucket per client: `rate` calls a second, bursts up to `burst`."""

    def __init__(self, rate: float = 20.0, burst: int = 40, max_clients: int = 10_000) -> None:
        self.rate, self.burst, self.max_clients = rate, float(burst), max_clients
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, stamp)
        self._lock = threading.Lock()

    def allow(self, client: str, now: float | None = None) -> bool:
        """Take a token from the client's bucket; False when it is empty."""
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, stamp = self._buckets.get(client, (self.burst, now))
            tokens = min(self.burst, tokens + (now - stamp) * self.rate)
            allowed = tokens >= 1.0
            if len(self._buckets) >= self.max_clients and client not in self._buckets:
                # Forget full buckets first: they are the same as unseen clients.
                for key, (t, s) in list(self._buckets.items()):
                    if t + (now - s) * self.rate >= self.burst:
                        del self._buckets[key]
            self._buckets[client] = (tokens - 1.0 if allowed else tokens, now)
            return allowed


class _ChangeAwareServer(Server[Any]):
    """The SDK's Server, advertising listChanged (tools, resources, prompts) on every
    transport.

    The streamable-HTTP session manager asks for the default initialization
    options (no list_changed), though the notifications do go out.
    """

    def create_initialization_options(
            self, notification_options: NotificationOptions | None = None,
            experimental_capabilities: dict[str, dict[str, Any]] | None = None,
            extensions: dict[str, dict[str, Any]] | None = None) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(
                prompts_changed=True, resources_changed=True, tools_changed=True),
            experimental_capabilities, extensions)


class McpToolServer:
    """An MCP server over `host.tools`; `.server` is the SDK's low-level Server."""

    def __init__(self, host: Host, *, include_host_tools: bool = False,
                 include_mcp_tools: bool = False, include_mcp_catalog: bool = False,
                 name: str = "wasmext",
                 rate: float = 20.0, burst: int = 40, poll_interval: float = 1.0,
                 manage: ManageSettings | None = None) -> None:
        self.host = host
        # The opt-in management tools (mcp.server.manage), served beside the registry's.
        self.manager = Manager(host, manage) if manage is not None else None
        self.manage_tools = {t.name: t for t in self.manager.tools()} \
            if self.manager is not None else {}
        self.include_host_tools = include_host_tools
        self.include_mcp_tools = include_mcp_tools
        self.poll_interval = poll_interval
        self.limiter = RateLimiter(rate, burst)
        self.catalog = ServedCatalog(host, include_mcp_catalog)
        # Plugins' (and upstream servers') hints claiming safety pass only when vouched.
        self.hint_trust = HintTrust(host)
        # Each tool's digest, by the (immutable) Tool object: a plugin may register 256
        # tools of 64 KiB schemas, and the fingerprint is taken before every request.
        self._tool_digests: dict[int, tuple[Tool, str]] = {}
        self.changes = ListChanges(lambda: {"tools": self._compute_fingerprint(),
                                            **self.catalog.fingerprints()})
        self.bus = self.changes.bus
        self.server: Server[Any] = _ChangeAwareServer(
            name, version="0.1.0",
            instructions="Tools served by wasmext plugins (sandboxed WebAssembly).",
            lifespan=self._lifespan,
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self.bus),
            **self.catalog.handlers(self._before),
        )

    # -- the tool set -------------------------------------------------------------------

    def visible_tools(self) -> list[Tool]:
        """The registry's tools this server serves, by name."""
        tools = [t for t in dict(self.host.tools.tools).values()
                 if self._serves(t) and t.name not in self.manage_tools]
        return sorted(tools + list(self.manage_tools.values()), key=lambda t: t.name)

    def _serves(self, tool: Tool) -> bool:
        return _servable(tool) and (
            tool.owner.startswith("plugin:")
            or (self.include_host_tools and tool.owner == "host")
            or (self.include_mcp_tools and tool.owner.startswith("mcp:")))

    def _visible(self, name: str) -> Tool | None:
        if name in self.manage_tools:
            return self.manage_tools[name]
        tool = self.host.tools.tools.get(name)
        return tool if tool is not None and self._serves(tool) else None

    def _compute_fingerprint(self) -> str:
        tools = self.visible_tools()
        known, digests = self._tool_digests, {}
        for t in tools:
            kept = known.get(id(t))
            digest = kept[1] if kept is not None and kept[0] is t else fingerprint(
                (t.name, t.description, t.title, t.annotations, dict(t.input_schema),
                 dict(t.output_schema) if t.output_schema is not None else None))
            digests[id(t)] = (t, digest)
        self._tool_digests = digests  # only the tools served now: nothing piles up
        return fingerprint([d for _, d in digests.values()])

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        tool = self._visible(name)
        return dict(tool.input_schema) if tool is not None else None

    def initialization_options(self) -> InitializationOptions:
        """The MCP server's initialization options."""
        return self.server.create_initialization_options()

    # -- change notifications -----------------------------------------------------------

    async def check_changed(self) -> bool:
        """Notify clients of each served list that differs from the last one seen."""
        return bool(await self.changes.check())

    async def notify_changed(self) -> None:
        """Tell every client the tool list changed (call after host.add/host.disable)."""
        await self.changes.notify({"tools"})

    def _remember(self, ctx: ServerRequestContext[Any]) -> None:
        self.changes.remember(ctx)

    async def _before(self, ctx: ServerRequestContext[Any]) -> None:
        self._remember(ctx)
        await self.check_changed()

    @asynccontextmanager
    async def _lifespan(self, _server: Server[Any]) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tg:
            if self.poll_interval > 0:
                tg.start_soon(self._poll)
            try:
                yield {}
            finally:
                tg.cancel_scope.cancel()

    async def _poll(self) -> None:
        while True:
            await anyio.sleep(self.poll_interval)
            try:
                await self.check_changed()
            except Exception:
                log.exception("tool list poll failed")

    # -- handlers -------------------------------------------------------------------------

    async def _list_tools(self, ctx: ServerRequestContext[Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        self._remember(ctx)
        await self.check_changed()
        tools = self.visible_tools()
        annotations = self.hint_trust.annotations(tools)
        return types.ListToolsResult(tools=[
            types.Tool(name=t.name, title=t.title or None,
                       description=clean_lines(t.description, DESCRIPTION_CAP) or None,
                       input_schema=dict(t.input_schema),
                       output_schema=dict(t.output_schema) if t.output_schema else None,
                       annotations=annotations[t.name])
            for t in tools])

    async def _call_tool(self, ctx: ServerRequestContext[Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        self._remember(ctx)
        await self.check_changed()
        client = _client_id(ctx)
        started = time.perf_counter()
        name = params.name

        def record(status: str, code: str = "") -> None:
            audit.info("client=%s tool=%r status=%s%s duration_ms=%.1f", client, name[:80],
                       status, f" code={code}" if code else "",
                       (time.perf_counter() - started) * 1000,
                       extra={"mcp_client": client, "tool": name[:80], "status": status,
                              "code": code})

        try:
            result = await self._run(ctx, client, name, params.arguments)
        except anyio.get_cancelled_exc_class():
            record("cancelled")
            raise
        record("error" if result.is_error else "ok",
               error_code(result) if result.is_error else "")
        return result

    async def _run(self, ctx: ServerRequestContext[Any], client: str, name: str,
                   arguments: Mapping[str, Any] | None) -> types.CallToolResult:
        if not self.limiter.allow(client):
            return error_result("rate limited", "rate_limited")
        tool = self._visible(name)
        if tool is None:
            return error_result(f"no tool {name!r}", "not_found")
        args = dict(arguments) if arguments is not None else {}
        if name in self.manage_tools:
            return await self._manage(tool, args)
        token = anyio.lowlevel.current_token()

        def report(progress: float, total: float | None, message: str | None) -> None:
            anyio.from_thread.run(_progress, ctx, progress, total, message, token=token)

        scope = CallScope(progress=report)
        traced = tracing.ACTIVE
        # A client that passes W3C trace context in the request's `_meta` gets this
        # call's spans in its trace.
        served = contextlib.nullcontext() if traced is None else traced.span(
            "wasmext.mcp.serve tools/call", {"wasmext.tool": tracing.text(name),
                                             "wasmext.mcp_client": tracing.text(client)},
            kind="server", parent=traced.extract(_meta_of(ctx)))

        def call() -> dict[str, Any]:
            with served, scope.bound(), \
                    self.host.session(f"mcp-{client}-{uuid.uuid4().hex[:12]}") as session:
                try:
                    return self.host.tools.call(name, args, session)
                finally:
                    if scope.cancelled_at is not None:
                        log.info("tool %s: the cancelled call ended %.0f ms after the cancel",
                                 name[:80], (time.monotonic() - scope.cancelled_at) * 1000)

        await anyio.to_thread.run_sync(scope.report, 0.0, None, "started")
        try:
            # Abandoned on cancel: the scope interrupts the plugin and the upstream call.
            outcome = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            scope.cancel()
            raise
        except Exception as exc:  # a session hook failing closed, say: still a tool error
            # Its text may carry what a plugin wrote: one inert, bounded line either way.
            message = clean(f"{type(exc).__name__}: {exc}")
            log.warning("tool %s failed outside the registry: %s", clean(name, 128), message)
            outcome = {"status": "error", "error": {"message": message, "code": "failed"}}
        await anyio.to_thread.run_sync(scope.report, 1.0, 1.0, outcome.get("status", "error"))
        if outcome.get("status") != "ok":
            error = outcome.get("error") or {}
            return error_result(str(error.get("message", "failed")),
                                 str(error.get("code") or "failed"))
        return tool_result(tool, outcome.get("output"))

    async def _manage(self, tool: Tool, args: dict[str, Any]) -> types.CallToolResult:
        """A management tool: checked arguments, run on a worker thread, then the served
        lists checked, so clients hear list_changed as the plugin set changes."""
        try:
            tool.validator.validate(args)
        except Exception as exc:  # jsonschema_rs.ValidationError
            message = (getattr(exc, "message", None) or str(exc)).splitlines()[0]
            return error_result(f"invalid arguments: {message}", "invalid")
        try:
            output = await anyio.to_thread.run_sync(tool.run, args, None)
        except WasmextError as err:
            code = "refused" if isinstance(err, ManageRefused) else \
                err.reason.replace(" ", "_")
            result = error_result(without_paths(err.message), code)
        except OSError as exc:  # the disk refusing an install: the host's trouble, said
            log.warning("management tool %s failed: %s", tool.name, exc)
            result = error_result(f"the host could not do it ({exc.strerror})", "failed")
        else:
            result = tool_result(tool, output)
        await self.check_changed()
        return result

    # -- transports -----------------------------------------------------------------------

    async def run_stdio(self) -> None:
        """Serve MCP over stdin and stdout until the client leaves."""
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read_stream, write_stream):
            await self.server.run(read_stream, write_stream, self.initialization_options())

    def http_app(self, host: str = "127.0.0.1", token: str | None = None) -> Any:
        """The streamable-HTTP ASGI app (at /mcp), DNS-rebinding protected on every
        loopback address; with `token`, every request needs it as a bearer token (mcp.auth)."""
        require_token_for(host, token)
        app = self.server.streamable_http_app(host=host,
                                              transport_security=rebinding_guard(host))
        return BearerAuth(app, token) if token is not None else app


def _servable(tool: Tool) -> bool:
    """MCP wants object schemas; one that is not would make clients refuse the whole list."""
    return tool.input_schema.get("type") == "object" and (
        tool.output_schema is None or tool.output_schema.get("type") == "object")


def _client_id(ctx: ServerRequestContext[Any]) -> str:
    connection = getattr(ctx.session, "_connection", None)
    session_id = getattr(connection, "session_id", None)
    if isinstance(session_id, str) and session_id:
        return session_id
    request = ctx.request
    peer = getattr(request, "client", None)
    if peer is not None:
        return f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"
    return "stdio" if request is None else "http"


def _meta_of(ctx: ServerRequestContext[Any]) -> Mapping[str, Any] | None:
    """The request's `_meta` map, if the client sent one."""
    meta = getattr(ctx, "meta", None)
    return meta if isinstance(meta, Mapping) else None


async def _progress(ctx: ServerRequestContext[Any], progress: float, total: float | None,
                    message: str | None) -> None:
    try:  # a no-op unless the client sent a progress token
        await ctx.session.report_progress(progress, total, message)
    except Exception:  # progress is advisory
        log.debug("progress notification failed", exc_info=True)


def serve_stdio(host: Host, *, include_host_tools: bool = False, **options: Any) -> None:
    """Serve `host`'s tools on stdin/stdout until the client closes them."""
    server = McpToolServer(host, include_host_tools=include_host_tools, **options)
    anyio.run(server.run_stdio)


def build_http_server(wasm_host: Host, host: str = "127.0.0.1", port: int = 8765, *,
                      include_host_tools: bool = False, log_level: str = "warning",
                      token: str | None = None, **options: Any) -> uvicorn.Server:
    """A uvicorn server for `wasm_host`'s tools at http://HOST:PORT/mcp (call `.run()`).

    A non-loopback `host` needs a bearer `token` (ConfigError otherwise)."""
    import uvicorn

    server = McpToolServer(wasm_host, include_host_tools=include_host_tools, **options)
    config = uvicorn.Config(server.http_app(host, token), host=host, port=port,
                            log_level=log_level, lifespan="on")
    return uvicorn.Server(config)


def serve_http(wasm_host: Host, host: str = "127.0.0.1", port: int = 8765, *,
               include_host_tools: bool = False, **options: Any) -> None:
    """Serve `wasm_host`'s tools over streamable HTTP (loopback unless `host` says otherwise)."""
    build_http_server(wasm_host, host, port, include_host_tools=include_host_tools,
                      **options).run()
