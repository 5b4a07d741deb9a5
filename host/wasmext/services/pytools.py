"""Host Python tools declared the way FastMCP users write them.

    @host.tool
    def add(a: int, b: int = 1) -> int:
        "Add two numbers."
        return a + b

The input schema comes from the type hints (through pydantic, which the MCP
SDK already brings), the description from the docstring, and the tool is
called with keyword arguments, each converted to its annotated type.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict, create_model

from wasmext.errors import ConfigError

if TYPE_CHECKING:
    from wasmext.services.tools import ToolRegistry

__all__ = ["host_tool", "keyword_tool", "tool_decorator"]

F = TypeVar("F", bound=Callable[..., Any])


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=False)


def keyword_tool(fn: Callable[..., Any]) -> tuple[dict[str, Any], Callable[[dict[str, Any]], Any]]:
    """The JSON Schema of `fn`'s parameters and a caller that takes the tool's argument map."""
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigError(f"tool {fn.__name__}: parameter {name!r} must be passable by "
                              "keyword (no *args, **kwargs or positional-only)")
        default = ... if param.default is param.empty else param.default
        fields[name] = (hints.get(name, Any), default)
    model = create_model(f"{fn.__name__}_arguments", __base__=_Arguments, **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)

    def call(args: dict[str, Any]) -> Any:
        parsed = model.model_validate(args)
        return fn(**{name: getattr(parsed, name) for name in fields})

    return schema, call


def tool_decorator(registry: ToolRegistry, fn: Any = None, *, name: str | None = None,
                   description: str | None = None) -> Any:
    """Register a Python function as a host tool: `@host.tool` or `@host.tool(name=...)`.
    Schema from the type hints, description from the docstring, called by keyword; the
    function is returned unchanged."""

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        schema, call = keyword_tool(func)
        registry.register_python(name or func.__name__, call, input_schema=schema,
                                 description=description or inspect.getdoc(func) or "")
        return func

    return register(fn) if fn is not None else register


def host_tool(host: Any, fn: Any = None, *, name: str | None = None,
              description: str | None = None) -> Any:
    """`Host.tool`: the decorator over the host's tool registry."""
    return tool_decorator(host.tools, fn, name=name, description=description)
