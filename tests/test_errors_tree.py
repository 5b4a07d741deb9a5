"""One error module holds the whole tree, and its docstring draws it (issue 23).

Every public exception class anywhere in the package is defined in
`wasmext.errors`, derives from `WasmextError` and is named in the drawing; every
name in the drawing is a class there, and the drawing's indentation is the real
inheritance.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import wasmext
from wasmext import errors
from wasmext.errors import WasmextError

# A drawn name: the root at the margin, or a child after a branch (├── / └──).
_DRAWN = re.compile(r"^    (?:(?P<root>[A-Z]\w*)|(?P<pad>[│ ]*)[├└]── (?P<name>[A-Z]\w*))")


def _modules() -> list[ModuleType]:
    found = []
    for info in pkgutil.walk_packages(wasmext.__path__, "wasmext."):
        try:
            found.append(importlib.import_module(info.name))
        except ImportError as exc:  # an optional extra that is not installed
            if not (exc.name or "").startswith("wasmext"):
                continue
            raise
    return found


def _exception_classes() -> dict[str, type[BaseException]]:
    classes: dict[str, type[BaseException]] = {}
    for module in _modules():
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException)
                    and value.__module__.startswith("wasmext") and not name.startswith("_")):
                classes[f"{value.__module__}.{value.__qualname__}"] = value
    return classes


def _drawing() -> dict[str, str | None]:
    """Each drawn name with the name it is drawn under (None for the root)."""
    parents: dict[str, str | None] = {}
    stack: list[str] = []  # stack[d] is the latest name drawn at depth d
    for line in (errors.__doc__ or "").splitlines():
        match = _DRAWN.match(line)
        if match is None:
            continue
        if match["root"]:
            name, depth = match["root"], 0
        else:
            name, depth = match["name"], len(match["pad"]) // 4 + 1
        assert name not in parents, f"{name} is drawn twice"
        del stack[depth:]
        parents[name] = stack[-1] if stack else None
        stack.append(name)
    return parents


def test_the_package_has_exception_classes_outside_the_errors_module_to_find() -> None:
    # The walk reaches the modules that raise the moved classes (it sees their imports).
    seen = {module.__name__ for module in _modules()}
    assert {"wasmext.state.base", "wasmext.sandbox.hostcalls", "wasmext.cluster.link",
            "wasmext.mcp.client.tools", "wasmext._toml"} <= seen


def test_every_public_exception_class_is_defined_in_errors_under_the_root() -> None:
    classes = _exception_classes()
    assert len(classes) > 50
    elsewhere = sorted(path for path, cls in classes.items() if cls.__module__ != "wasmext.errors")
    assert elsewhere == []
    outside = sorted(path for path, cls in classes.items() if not issubclass(cls, WasmextError))
    assert outside == []


def test_every_exception_class_is_drawn_and_every_drawn_name_is_one() -> None:
    drawn = _drawing()
    classes = {cls.__name__ for cls in _exception_classes().values()}
    assert sorted(classes - set(drawn)) == []
    for name in drawn:
        value = getattr(errors, name, None)
        assert inspect.isclass(value) and issubclass(value, WasmextError), name
    assert sorted(set(drawn) - set(errors.__all__)) == []


def test_the_drawing_is_the_inheritance() -> None:
    for name, parent in _drawing().items():
        cls = getattr(errors, name)
        if parent is None:
            assert cls is WasmextError
        else:
            assert cls.__bases__[0] is getattr(errors, parent), f"{name} is not under {parent}"


@pytest.mark.parametrize(("name", "extra"), [("DecodeError", ValueError),
                                             ("ConfigTextError", ValueError),
                                             ("McpToolError", RuntimeError)])
def test_errors_caught_as_builtins_still_are(name: str, extra: type[Exception]) -> None:
    assert issubclass(getattr(errors, name), extra)


def test_moved_errors_keep_their_signatures_and_codes() -> None:
    op = errors.OpError("denied", "no")
    assert (op.code, op.message, str(op)) == ("denied", "no", "no")
    refused = errors.Refused("limit", "too big")
    assert (refused.code, refused.message) == ("limit", "too big")
    assert errors.ModelError("late", timed_out=True).timed_out
    assert errors.StateUnavailable("down").code == "unavailable"
    assert errors.EventDenied("x").code == "denied"
    assert isinstance(errors.EventDenied("x"), errors.CapabilityDenied)
    assert errors.OutOfTime("late").describe() == "wasmext: out of time: late"


def test_the_old_import_paths_name_the_same_classes() -> None:
    from wasmext._toml import ConfigTextError
    from wasmext.cluster.contract import ContractError
    from wasmext.cluster.link import NatsUnavailable
    from wasmext.mcp.client.tools import McpToolError
    from wasmext.observe.events import EventError
    from wasmext.sandbox.calltree import OutOfTime
    from wasmext.sandbox.codec import DecodeError
    from wasmext.sandbox.hostcalls import OpError
    from wasmext.services.http.guard import Refused
    from wasmext.services.llm.client import ModelError
    from wasmext.state import StateError

    assert (ConfigTextError, ContractError, NatsUnavailable, McpToolError, EventError,
            OutOfTime, DecodeError, OpError, ModelError, Refused, StateError) == (
        errors.ConfigTextError, errors.ContractError, errors.NatsUnavailable,
        errors.McpToolError, errors.EventError, errors.OutOfTime, errors.DecodeError,
        errors.OpError, errors.ModelError, errors.Refused, errors.StateError)
