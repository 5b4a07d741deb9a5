"""An MCP test server whose resources and prompts change while connected (official Python
SDK, low-level server, stdio). It advertises `resources.listChanged` and
`prompts.listChanged` (unless $CATALOG_QUIET is set) and offers the tools
`add_resource(uri, name, description?)`, `add_prompt(name, description?)` (each adds one
and announces the new list), `announce(kind)` (the notification with nothing changed,
`times` over), `counts()` (how often resources/list and prompts/list were asked) and
`flood()` (from then on resources/list answers pages of 300 with a next cursor, forever),
`add_template(uri_template, name)` (adds a resource template, announces resources) and
`hostile_templates()` (5000 templates: huge, control characters, escapes; announces).
Resources under `file:///notes/{day}` read as the template's."""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server

resources = [types.Resource(uri="file:///first.txt", name="first", mime_type="text/plain")]
prompts = [types.Prompt(name="first", description="The first prompt")]
templates = [types.ResourceTemplate(uri_template="file:///notes/{day}", name="notes",
                                    mime_type="text/plain")]
counts = {"resources": 0, "prompts": 0}
flooding = False
TOOLS = [
    types.Tool(name="add_resource", input_schema={"type": "object", "properties": {
        "uri": {"type": "string"}, "name": {"type": "string"},
        "description": {"type": "string"}}, "required": ["uri", "name"]}),
    types.Tool(name="add_prompt", input_schema={"type": "object", "properties": {
        "name": {"type": "string"}, "description": {"type": "string"}},
        "required": ["name"]}),
    types.Tool(name="announce", input_schema={"type": "object", "properties": {
        "kind": {"type": "string"}, "times": {"type": "integer"}}, "required": ["kind"]}),
    types.Tool(name="counts", input_schema={"type": "object"}),
    types.Tool(name="add_template", input_schema={"type": "object", "properties": {
        "uri_template": {"type": "string"}, "name": {"type": "string"}},
        "required": ["uri_template", "name"]}),
    types.Tool(name="hostile_templates", input_schema={"type": "object"}),
    types.Tool(name="flood", input_schema={"type": "object"}),
]


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
    counts["resources"] += 1
    if flooding:
        start = int(params.cursor) if params is not None and params.cursor else 0
        return types.ListResourcesResult(next_cursor=str(start + 300), resources=[
            types.Resource(uri=f"file:///flood/{i}", name=f"flood {i}")
            for i in range(start, start + 300)])
    return types.ListResourcesResult(resources=list(resources))


async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=list(templates))


def _hostile() -> list[types.ResourceTemplate]:
    bad = [types.ResourceTemplate(uri_template="file:///x/{a}" + "y" * 100_000, name="huge"),
           types.ResourceTemplate(uri_template="file:///\x1b[31m/{a}", name="escape"),
           types.ResourceTemplate(uri_template="file:///ok/{a}",
                                  name="\x1b]0;owned\x07name\u202e", description="\x1b[2J")]
    return bad + [types.ResourceTemplate(uri_template=f"file:///many/{i}/{{a}}", name=f"m{i}")
                  for i in range(5000)]


async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
    counts["prompts"] += 1
    return types.ListPromptsResult(prompts=list(prompts))


async def read_resource(ctx: Any, params: types.ReadResourceRequestParams
                        ) -> types.ReadResourceResult:
    return types.ReadResourceResult(contents=[types.TextResourceContents(
        uri=str(params.uri), text=f"contents of {params.uri}")])


async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    return types.GetPromptResult(messages=[types.PromptMessage(
        role="user", content=types.TextContent(text=f"prompt {params.name}"))])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    global flooding
    args = dict(params.arguments or {})
    session = ctx.session
    if params.name == "add_resource":
        resources.append(types.Resource(uri=args["uri"], name=args["name"],
                                        description=args.get("description")))
        await session.send_resource_list_changed()
    elif params.name == "add_prompt":
        prompts.append(types.Prompt(name=args["name"], description=args.get("description")))
        await session.send_prompt_list_changed()
    elif params.name == "add_template":
        templates.append(types.ResourceTemplate(uri_template=args["uri_template"],
                                                name=args["name"]))
        await session.send_resource_list_changed()
    elif params.name == "hostile_templates":
        templates[:] = _hostile()
        await session.send_resource_list_changed()
    elif params.name == "flood":
        flooding = True
        await session.send_resource_list_changed()
    elif params.name == "announce":
        for _ in range(int(args.get("times", 1))):
            if args["kind"] == "resources":
                await session.send_resource_list_changed()
            else:
                await session.send_prompt_list_changed()
    text = json.dumps(counts) if params.name == "counts" else "done"
    return types.CallToolResult(content=[types.TextContent(text=text)])


server: Server[Any] = Server(
    "catalog", on_list_tools=list_tools, on_call_tool=call_tool,
    on_list_resources=list_resources, on_read_resource=read_resource,
    on_list_resource_templates=list_templates,
    on_list_prompts=list_prompts, on_get_prompt=get_prompt)


async def main() -> None:
    loud = not os.environ.get("CATALOG_QUIET")
    options = server.create_initialization_options(NotificationOptions(
        prompts_changed=loud, resources_changed=loud, tools_changed=False))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
