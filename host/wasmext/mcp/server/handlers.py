"""The resources/* and prompts/* handlers of `wasmext mcp serve` (see `served`).

A read or a get runs the owning plugin's hook (`on_resource`, `on_prompt`) in a
fresh host session on a worker thread, like a tool call; a plugin's failure or
a malformed answer is an MCP error naming the plugin. The catalog is built
again only when a plugin's registration map changed (loaded, reloaded,
unloaded), so a bad entry is logged once per change, not per request or poll.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

from wasmext.mcp.server.catalog import (
    Catalog,
    catalog,
    match_template,
    owners_of,
    prompt_result,
    resource_contents,
)
from wasmext.mcp.server.changes import fingerprint
from wasmext.mcp.server.upstream import UpstreamExport
from wasmext.text import clean

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from wasmext.host import Host

__all__ = ["ServedCatalog"]


Before = Callable[["ServerRequestContext[Any]"], Awaitable[None]]


class ServedCatalog:
    """The resources and prompts the plugins (and, as a gateway, upstream servers) serve."""

    def __init__(self, host: Host, include_mcp_catalog: bool = False) -> None:
        self.host = host
        # The configured MCP servers' resources and prompts too (a gateway).
        self.upstream = UpstreamExport(host) if include_mcp_catalog else None
        self._key: list[tuple[str, Any]] = []
        self._catalog = Catalog({}, [], {})
        self._lock = threading.Lock()

    def current(self) -> Catalog:
        """The plugins' catalog, rebuilt when a registration map differs (any thread)."""
        plugins = dict(self.host.plugins)
        key = [(pid, lp.plugin.registration) for pid, lp in sorted(plugins.items())]
        with self._lock:
            if len(key) != len(self._key) or any(
                    pid != old_pid or (reg is not old and reg.extra != old.extra)
                    for (pid, reg), (old_pid, old) in zip(key, self._key, strict=True)):
                self._catalog = catalog(plugins)
            self._key = key  # holds the registrations: their ids are not reused meanwhile
            return self._catalog

    def fingerprints(self) -> dict[str, str]:
        """A fingerprint of the resource list and of the prompt list."""
        cat = self.current()
        known = self.upstream.versions() if self.upstream is not None else {}
        return {"resources": fingerprint(
                    [r.model_dump(mode="json") for _p, r in cat.resources.values()]
                    + [t.model_dump(mode="json") for _p, t in cat.templates]
                    + known.get("resources", [])),
                "prompts": fingerprint([p.model_dump(mode="json")
                                        for _p, _s, p in cat.prompts.values()]
                                       + known.get("prompts", []))}

    def _upstream_resources(self) -> dict[str, tuple[str, types.Resource]]:
        """uri -> (server, resource) of the servers' resources no plugin shadows."""
        if self.upstream is None:
            return {}
        plugins = self.current().resources
        out: dict[str, tuple[str, types.Resource]] = {}
        for server, resource in self.upstream.resources():
            if str(resource.uri) not in plugins:
                out.setdefault(str(resource.uri), (server, resource))
        return out

    def handlers(self, before: Before) -> dict[str, Any]:
        """Keyword arguments for the SDK's low-level Server; `before(ctx)` runs first."""
        def wrapped(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            async def run(ctx: ServerRequestContext[Any], params: Any) -> Any:
                await before(ctx)
                return await handler(ctx, params)
            return run

        return {"on_list_resources": wrapped(self.list_resources),
                "on_list_resource_templates": wrapped(self.list_templates),
                "on_read_resource": wrapped(self.read_resource),
                "on_list_prompts": wrapped(self.list_prompts),
                "on_get_prompt": wrapped(self.get_prompt)}

    async def list_resources(self, ctx: ServerRequestContext[Any],
                             params: Any) -> types.ListResourcesResult:
        """Answer resources/list: the plugins' resources, then the upstream ones."""
        cat = self.current()
        upstream = await anyio.to_thread.run_sync(self._upstream_resources)
        return types.ListResourcesResult(resources=[r for _p, r in cat.resources.values()]
                                         + [r for _s, r in upstream.values()])

    def _upstream_templates(self) -> list[tuple[str, types.ResourceTemplate]]:
        """(server, template) of the servers' templates no plugin's template shadows."""
        if self.upstream is None:
            return []
        seen = {t.uri_template for _p, t in self.current().templates}
        out = []
        for server, template in self.upstream.templates():
            if template.uri_template not in seen:
                seen.add(template.uri_template)
                out.append((server, template))
        return out

    async def list_templates(self, ctx: ServerRequestContext[Any],
                             params: Any) -> types.ListResourceTemplatesResult:
        """Answer resources/templates/list: the plugins' templates, then the upstream ones."""
        cat = self.current()
        upstream = await anyio.to_thread.run_sync(self._upstream_templates)
        return types.ListResourceTemplatesResult(
            resource_templates=[t for _p, t in cat.templates] + [t for _s, t in upstream])

    def _upstream_owner(self, uri: str) -> str | None:
        """The server whose resource is `uri`, else the first whose template fits it."""
        found = self._upstream_resources().get(uri)
        if found is not None:
            return found[0]
        return next((server for server, t in self._upstream_templates()
                     if match_template(t.uri_template, uri)), None)

    async def list_prompts(self, ctx: ServerRequestContext[Any],
                           params: Any) -> types.ListPromptsResult:
        """Answer prompts/list: the plugins' prompts, then upstream ones not shadowed."""
        cat = self.current()
        upstream = await anyio.to_thread.run_sync(self.upstream.prompts) \
            if self.upstream is not None else []
        return types.ListPromptsResult(prompts=[p for _pid, _s, p in cat.prompts.values()]
                                       + [p for _s, _n, p in upstream
                                          if p.name not in cat.prompts])

    def _hook(self, pid: str, hook: str, data: dict[str, Any]) -> Any:
        with self.host.session(f"mcp-{hook}-{uuid.uuid4().hex[:12]}") as session:
            result, error = self.host.try_call(pid, hook, data, session)
        if result is None:
            raise MCPError(code=INTERNAL_ERROR,
                           message=clean(f"plugin {pid} {hook} failed: {error}"))
        return result.value

    async def read_resource(self, ctx: ServerRequestContext[Any],
                            params: types.ReadResourceRequestParams
                            ) -> types.ReadResourceResult:
        """Answer resources/read through the owning plugin's on_resource (or upstream)."""
        uri = str(params.uri)
        owners = owners_of(self.current(), uri)
        if len(owners) > 1:
            raise MCPError(code=INVALID_PARAMS, message=f"the resource {clean(uri, 200)} is "
                           f"claimed by the plugins {', '.join(owners)}: served by none")
        pid = owners[0] if owners else None
        if pid is None and self.upstream is not None:
            server = await anyio.to_thread.run_sync(self._upstream_owner, uri)
            if server is not None:
                return await anyio.to_thread.run_sync(self.upstream.read, server, uri)
        if pid is None:
            raise MCPError(code=INVALID_PARAMS, message=f"no resource {clean(uri, 200)}")
        value = await anyio.to_thread.run_sync(self._hook, pid, "on_resource", {"uri": uri})
        try:
            return types.ReadResourceResult(contents=resource_contents(pid, uri, value))
        except ValueError as exc:
            raise MCPError(code=INTERNAL_ERROR, message=clean(str(exc))) from None

    async def get_prompt(self, ctx: ServerRequestContext[Any],
                         params: types.GetPromptRequestParams) -> types.GetPromptResult:
        """Answer prompts/get through the owning plugin (or the upstream server)."""
        found = self.current().prompts.get(params.name)
        if found is None and self.upstream is not None:
            for server, short, _p in await anyio.to_thread.run_sync(self.upstream.prompts):
                if f"{server}__{short}" == params.name:
                    return await anyio.to_thread.run_sync(
                        self.upstream.get, server, short, dict(params.arguments or {}))
        if found is None:
            raise MCPError(code=INVALID_PARAMS,
                           message=f"no prompt {clean(params.name, 80)}")
        pid, short, _prompt = found
        value = await anyio.to_thread.run_sync(
            self._hook, pid, "on_prompt", {"name": short, "args": dict(params.arguments or {})})
        try:
            return prompt_result(pid, value)
        except ValueError as exc:
            raise MCPError(code=INTERNAL_ERROR, message=clean(str(exc))) from None
