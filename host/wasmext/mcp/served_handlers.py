"""The resources/* and prompts/* handlers of `wasmext mcp serve` (see `served`).

A read or a get runs the owning plugin's hook (`on_resource`, `on_prompt`) in a
fresh host session on a worker thread, like a tool call; a plugin's failure or
a malformed answer is an MCP error naming the plugin.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS

from wasmext.mcp.served import catalog, owner_of, prompt_result, resource_contents
from wasmext.text import clean

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from wasmext.host import Host

__all__ = ["ServedCatalog"]


class ServedCatalog:
    def __init__(self, host: Host) -> None:
        self.host = host

    def handlers(self) -> dict[str, Any]:
        """Keyword arguments for the SDK's low-level Server."""
        return {"on_list_resources": self.list_resources,
                "on_list_resource_templates": self.list_templates,
                "on_read_resource": self.read_resource,
                "on_list_prompts": self.list_prompts, "on_get_prompt": self.get_prompt}

    async def list_resources(self, ctx: ServerRequestContext[Any],
                             params: Any) -> types.ListResourcesResult:
        cat = catalog(self.host.plugins)
        return types.ListResourcesResult(resources=[r for _p, r in cat.resources.values()])

    async def list_templates(self, ctx: ServerRequestContext[Any],
                             params: Any) -> types.ListResourceTemplatesResult:
        cat = catalog(self.host.plugins)
        return types.ListResourceTemplatesResult(resource_templates=[t for _p, t in
                                                                     cat.templates])

    async def list_prompts(self, ctx: ServerRequestContext[Any],
                           params: Any) -> types.ListPromptsResult:
        cat = catalog(self.host.plugins)
        return types.ListPromptsResult(prompts=[p for _pid, _s, p in cat.prompts.values()])

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
        uri = str(params.uri)
        pid = owner_of(catalog(self.host.plugins), uri)
        if pid is None:
            raise MCPError(code=INVALID_PARAMS, message=f"no resource {clean(uri, 200)}")
        value = await anyio.to_thread.run_sync(self._hook, pid, "on_resource", {"uri": uri})
        try:
            return types.ReadResourceResult(contents=resource_contents(pid, uri, value))
        except ValueError as exc:
            raise MCPError(code=INTERNAL_ERROR, message=clean(str(exc))) from None

    async def get_prompt(self, ctx: ServerRequestContext[Any],
                         params: types.GetPromptRequestParams) -> types.GetPromptResult:
        found = catalog(self.host.plugins).prompts.get(params.name)
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
