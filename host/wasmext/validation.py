"""Config validation, one way: pydantic models carry the rules, one ConfigError the verdict.

Every section of wasmext.toml (and the files that share its sections: a plugin's
`[mcp]` table, an extension registry) is a pydantic model: types, value rules
(field validators) and the rules between fields (validators reading earlier fields).
`check` validates a whole document and turns every problem pydantic found into one
ConfigError listing them all, each as `field 'dotted.path': reason`.

A config can be hostile (a generated file, a plugin's manifest): the keys in a field
path and the reasons are cleaned to one inert line and cut (`FIELD_CAP`,
`REASON_CAP`), at most `SHOWN` problems are spelled out, and a value never reaches a
message (pydantic's `input` is dropped: it may be a token).
"""

from __future__ import annotations

import difflib
from collections import abc
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from wasmext.errors import ConfigError
from wasmext.text import clean

if TYPE_CHECKING:
    from pydantic import ValidationInfo

__all__ = ["FIELD_CAP", "KEPT", "REASON_CAP", "SECTION", "SHOWN", "SOURCE_CAP", "Count",
           "Nonnegative", "Seconds", "check", "config_error", "context_path", "problem",
           "problems_of"]

SHOWN = 10         # problems spelled out in the message; the rest are counted
KEPT = 100         # problems kept on the error (`ConfigError.problems`)
FIELD_CAP = 100    # characters of one field path
REASON_CAP = 160   # characters of one reason
SOURCE_CAP = 512   # characters of the file's name that starts the message

# Strict (a "1" is no integer, true is no number) and closed (a typo is no silent default).
SECTION = ConfigDict(strict=True, extra="forbid", frozen=True)

Count = Annotated[int, Field(strict=True, gt=0)]
Nonnegative = Annotated[int, Field(strict=True, ge=0)]
Seconds = Annotated[float, Field(strict=True, gt=0)]

# pydantic's error types, said the way the rest of wasmext says them.
_WORDS = {"int_type": "must be an integer", "bool_type": "must be true or false",
          "string_type": "must be a string", "list_type": "must be an array",
          "tuple_type": "must be an array", "dict_type": "must be a table",
          "model_type": "must be a table", "model_attributes_type": "must be a table",
          "dataclass_type": "must be a table", "missing": "is required",
          "float_type": "must be a number", "extra_forbidden": "unknown field",
          "unexpected_keyword_argument": "unknown field", "finite_number": "must be finite"}
_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
           "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}

M = TypeVar("M", bound="BaseModel")


def problem(reason: str, sub: str | None = None) -> NoReturn:
    """Fail the field being validated with `reason` (at its sub-field `sub`, when given)."""
    context: dict[str, Any] = {"reason": reason}
    if sub:
        context["sub"] = sub
    raise PydanticCustomError("config", "{reason}", context)


def context_path(info: ValidationInfo) -> Path | None:
    """The file a document came from, as `check` passed it to the validators."""
    ctx = info.context if isinstance(info.context, Mapping) else {}
    path = ctx.get("path")
    return path if isinstance(path, Path) else None


def _field(loc: Iterable[int | str], prefix: str) -> str:
    out = prefix
    for part in loc:
        if part == "[key]":  # the key of a table itself is the problem: name the key
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:  # an empty key would vanish between two dots: show it quoted
            out += ("." if out else "") + (clean(str(part), 64) or '""')
    return clean(out, FIELD_CAP)


def _reason(err: Mapping[str, Any]) -> str:
    kind, ctx = err.get("type"), err.get("ctx") or {}
    if kind == "config":
        text = str(ctx.get("reason", ""))
    elif kind in _WORDS:
        text = _WORDS[str(kind)]
    elif kind in _BOUNDS:
        key, sign = _BOUNDS[str(kind)]
        text = f"must be {sign} {ctx.get(key)}"
    elif kind == "value_error":
        text = str(ctx.get("error", err.get("msg", "")))
    else:
        text = str(err.get("msg", "")).replace("Input should be", "must be")
    return clean(text or str(kind), REASON_CAP)


def _model_in(annotation: Any) -> Any:
    """`annotation` without Optional and Annotated around it: a model, a container or a
    plain type."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, UnionType):
            inner = [a for a in get_args(annotation) if a is not type(None)]
            if len(inner) != 1:
                return annotation
            annotation = inner[0]
        else:
            return annotation


def _fields_at(model: Any, loc: list[int | str]) -> list[str] | None:
    """The field names the table at `loc` (in a document of `model`) has, or None when
    the path does not lead to a model's table."""
    current = model
    for part in loc:
        current = _model_in(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            fields = {f.alias or name: f for name, f in current.model_fields.items()}
            if str(part) not in fields:
                return None
            current = fields[str(part)].annotation
        elif get_origin(current) in (dict, Mapping, abc.Mapping) and len(get_args(current)) == 2:
            current = get_args(current)[1]  # `part` is a key the operator chose
        elif get_origin(current) in (list, tuple, abc.Sequence) and get_args(current):
            current = get_args(current)[0]
        else:
            return None
    current = _model_in(current)
    if isinstance(current, type) and issubclass(current, BaseModel) and \
            current.model_config.get("extra") == "forbid":
        # A key the file cannot hold (the server table's `__server_name__`) is no hint.
        return sorted(key for key in (f.alias or name for name, f in
                                      current.model_fields.items()) if not key.startswith("_"))
    return None


def _unknown(name: str, known: list[str] | None) -> str:
    """The reason for an unknown field `name`, with the field meant (or those there are)."""
    if not known:
        return _WORDS["extra_forbidden"]
    name = name[:FIELD_CAP]  # the file's key: bounded before it is compared
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6) or \
        [key for key in known if name and key.startswith(name)][:1]  # fuel: fuel_per_call
    if close:
        return f"unknown field; did you mean '{close[0]}'?"
    listed = f"unknown field (known: {', '.join(known)})"
    return listed if len(listed) <= REASON_CAP else _WORDS["extra_forbidden"]


def problems_of(exc: ValidationError, prefix: str = "", limit: int = KEPT,
                model: Any = None) -> list[tuple[str, str]]:
    """(field path, reason) for the first `limit` problems pydantic found, cleaned and capped.
    With the `model` validated, an unknown field's reason names the field it is near
    (`did you mean 'instance_pool'?`) or the table's fields."""
    out = []
    for err in exc.errors(include_url=False, include_input=False)[:limit]:
        loc = list(err["loc"])
        sub = (err.get("ctx") or {}).get("sub")
        if sub:
            loc.append(str(sub))
        reason = _reason(err)
        if err.get("type") == "extra_forbidden" and model is not None and loc:
            reason = clean(_unknown(str(loc[-1]), _fields_at(model, loc[:-1])), REASON_CAP)
        out.append((_field(loc, prefix), reason))
    return out


def config_error(problems: list[tuple[str, str]], source: str | Path | None = None,
                 total: int | None = None) -> ConfigError:
    """One ConfigError listing `problems` (of `total`): the first `SHOWN` spelled out, the
    rest counted."""
    total = len(problems) if total is None else total
    shown = "; ".join(f"field '{f}': {r}" for f, r in problems[:SHOWN])
    if total > SHOWN:
        shown += f"; and {total - SHOWN} more problems"
    head = f"{clean(str(source), SOURCE_CAP)}: " if source else ""
    return ConfigError(head + shown, problems=tuple(problems[:KEPT]))


def check(model: type[M], data: Any, path: Path | None = None, *, prefix: str = "",
          source: str | Path | None = None, context: Mapping[str, Any] | None = None) -> M:
    """`data` validated as `model`, or one ConfigError naming every problem and its field.

    Field paths start with `prefix`; the message starts with `source` (default: the
    file `path`, else "config"; "" for none). The validators see `path` (and any
    `context`) through the validation context.
    """
    try:
        return model.model_validate(data, context={**(context or {}), "path": path})
    except ValidationError as exc:
        raise config_error(problems_of(exc, prefix, model=model),
                           source if source is not None else path or "config",
                           exc.error_count()) from None
