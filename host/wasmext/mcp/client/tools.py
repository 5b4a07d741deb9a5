"""Registry tools made from a configured server's listed MCP tools, and their results
as registry output (the content shapes of `wasmext.mcp.content`)."""

from __future__ import annotations

import logging
import re
from typing import Any

from wasmext.errors import ConfigError, McpToolError
from wasmext.mcp.content import from_mcp
from wasmext.services.tools import Runner, Tool, bounded_schema, compile_schema, inert_schema
from wasmext.text import clean, clean_lines

__all__ = ["McpToolError", "build_tool", "reason", "result_output", "tool_name"]

log = logging.getLogger("wasmext.mcp")

MAX_DESCRIPTION = 1024
MAX_TITLE = 128
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HINTS = {"read_only_hint": "readOnlyHint", "destructive_hint": "destructiveHint",
          "idempotent_hint": "idempotentHint", "open_world_hint": "openWorldHint"}


def tool_name(server: str, tool: str) -> str:
    """The registry name of an MCP tool: `{server}__{tool}`, sanitized, at most 64."""
    return _UNSAFE.sub("_", f"{server}__{tool}")[:64]


def build_tool(server: str, name: Any, description: Any, input_schema: Any,
               run: Runner, output_schema: Any = None, title: Any = None,
               annotations: Any = None) -> Tool | None:
    """A registry Tool for one listed MCP tool, or None (logged) when it is unusable.

    A schema is kept (and compiled once, like every tool's) when it is a dict
    within a plugin schema's bounds (bytes, depth, `$ref` expansion: the server is
    another program, perhaps one a plugin names) that compiles; anything else skips
    the tool (an unusable output schema is only dropped). What `mcp serve` passes on
    is held to a plugin tool's rule: title, description and the schemas' prose
    cleaned, and a tool whose other schema strings hold a control, format or bidi
    character skipped (`services.tools.inert_schema`).
    """
    where = f"mcp server {server}: tool {clean(repr(name), 80)}"
    if not isinstance(name, str) or not name:
        log.warning("%s skipped: the name must be a non-empty string", where)
        return None
    try:
        input_schema, validator = _compiled(input_schema)
    except ConfigError as err:
        log.warning("%s skipped: input schema %s", where, clean(err.message, 300))
        return None
    if output_schema is not None:
        try:
            output_schema, _ = _compiled(output_schema)
        except ConfigError as err:
            log.info("%s: output schema ignored (%s)", where, clean(err.message, 300))
            output_schema = None
    text = clean_lines(description, MAX_DESCRIPTION) if isinstance(description, str) else ""
    hints = {camel: value for snake, camel in _HINTS.items()
             if isinstance(value := getattr(annotations, snake, None), bool)}
    return Tool(tool_name(server, name), text, input_schema,
                f"mcp:{server}", run, output_schema, validator,
                title=clean(title, MAX_TITLE) if isinstance(title, str) else "",
                annotations=hints or None)


def _compiled(schema: Any) -> tuple[dict[str, Any], Any]:
    """The schema with its prose cleaned, and its validator (ConfigError: unusable)."""
    if not isinstance(schema, dict):
        raise ConfigError(f"is not a JSON object ({type(schema).__name__})")
    bounded_schema(schema, "schema", "the schema")
    shown = inert_schema(schema, "schema", "the schema")
    if shown != schema:  # an unchanged schema stays the object listed (validators cache it)
        schema = shown
    return schema, compile_schema(schema, "schema")


def reason(exc: BaseException) -> str:
    """A short, cleaned reason for an exception (an exception group's first leaf)."""
    while getattr(exc, "exceptions", None):  # an exception group: its first leaf
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return clean(str(exc) or type(exc).__name__, 300)  # often the remote server's words


def result_output(server: str, result: Any) -> Any:
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
