"""A tool's outcome (the registry's result map) as an MCP CallToolResult.

Success: a plugin's `{"content": [...], "structured"?}` (see `content`) becomes
those blocks; any other output is one text block (JSON unless a string) and,
when it is a map or the tool declares an outputSchema, structuredContent. When
the tool declares an outputSchema the structured content is checked against it
first: a TypeScript client rejects a mismatch as a protocol error, so it is a
tool error (`invalid_output`) here. Failure: text only, `code: message`.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from wasmext.errors import ConfigError
from wasmext.mcp.content import content_shape, to_mcp
from wasmext.services.tools import Tool, compile_schema
from wasmext.text import clean

__all__ = ["error_code", "error_result", "tool_result"]


def jsonable(value: Any) -> Any:
    """The value with bytes as {"$bin": hex}, so JSON can carry it."""
    if isinstance(value, bytes):
        return {"$bin": value.hex()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value


def error_result(message: str, code: str) -> types.CallToolResult:
    """A tool error result: one cleaned "code: message" line of text."""
    # A plugin may have written both: one inert, bounded line each. Text only: clients
    # (the TypeScript SDK, the Inspector) check any structuredContent against the tool's
    # outputSchema, error results included.
    message, code = clean(message), clean(code, 64)
    return types.CallToolResult(content=[types.TextContent(text=f"{code}: {message}")],
                                is_error=True)


def error_code(result: types.CallToolResult) -> str:
    """The code of an error result made by error_result ("" if none)."""
    first = result.content[0] if result.content else None
    text = first.text if isinstance(first, types.TextContent) else ""
    return text.partition(": ")[0] if ": " in text else ""


_validators: dict[int, tuple[Any, Any]] = {}  # id(output schema) -> (schema, validator)


def _output_validator(tool: Tool) -> Any:
    schema = tool.output_schema
    cached = _validators.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    validator = compile_schema(schema, f"tool {tool.name} output_schema")
    if len(_validators) > 4096:
        _validators.clear()
    _validators[id(schema)] = (schema, validator)
    return validator


def tool_result(tool: Tool, output: Any) -> types.CallToolResult:
    """The MCP result of a tool's output: content blocks, or text with structured content."""
    owner = tool.owner.replace(":", " ", 1)
    structured: Any
    if content_shape(output):
        try:
            content = to_mcp(output["content"], owner)
        except ValueError as exc:
            return error_result(str(exc), "invalid_output")
        structured = jsonable(output.get("structured"))
    else:
        output = jsonable(output)
        content = [types.TextContent(text=output if isinstance(output, str)
                                     else json.dumps(output))]
        structured = output if isinstance(output, dict) else None
        if structured is None and tool.output_schema is not None:
            structured = {"result": output}
    if tool.output_schema is not None:
        try:
            problem = next(iter(_output_validator(tool).iter_errors(structured)), None)
        except ConfigError as err:
            return error_result(err.message, "invalid_output")
        if problem is not None:
            return error_result(f"{owner}: tool {tool.name} answered output that does not "
                                f"match its output_schema: {clean(problem.message, 200)}",
                                "invalid_output")
    if structured is not None and not isinstance(structured, dict):
        return error_result(f"{owner}: 'structured' must be a map", "invalid_output")
    return types.CallToolResult(content=content, structured_content=structured, is_error=False)
