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
from typing import Any, TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict, create_model

from wasmext.errors import ConfigError

__all__ = ["keyword_tool"]

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
