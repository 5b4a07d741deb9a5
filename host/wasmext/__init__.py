"""wasmext: a WebAssembly plugin host for Python.

    from wasmext import Runtime
    with Runtime() as rt:
        plugin = rt.load("plugins/pii-mask")
        print(plugin.call("on_plain_text", "mail me at a@b.example").value)

Untrusted plugins run in a wasmtime sandbox with fuel, memory, time and
host-call limits and deny-by-default capabilities; every failure is a named
error under `WasmextError`.
"""

# Importing the package loads nothing heavy: each public name other than the errors is
# imported from its module on first use (PEP 562), so `import wasmext` and the CLI's
# `--help` start fast and a program pays only for the layers it touches. The errors
# module is a leaf and is loaded at once: every one of its classes is public API.
#
# The public API is what an embedding program uses: the runtime and host, sessions,
# plugins and their limits, the config and policy loaders, what the calls return, and
# every error. Everything else (host services, op contexts, engine and compile caps,
# manifests, the LLM and HTTP services) stays importable from its own module.
import logging
from typing import TYPE_CHECKING, Any

from wasmext import errors as _errors
from wasmext._version import __version__ as __version__
from wasmext.errors import *  # noqa: F403

# The one list of the public names that are not errors: name -> the module defining it.
_LAZY: dict[str, str] = {
    "AsyncSession": "wasmext.aio",
    "CallResult": "wasmext.sandbox.instance",
    "CompileCache": "wasmext.sandbox.cache",
    "ExtensionResult": "wasmext.hooks.extensions",
    "Host": "wasmext.host",
    "HostConfig": "wasmext.config",
    "LifecycleResult": "wasmext.hooks.lifecycle",
    "Limits": "wasmext.sandbox.limits",
    "PipelineResult": "wasmext.hooks.pipeline",
    "Plugin": "wasmext.sandbox.plugin",
    "Policy": "wasmext.hooks.pipeline",
    "Prompt": "wasmext.hooks.extensions",
    "RescanReport": "wasmext.lifecycle.reload",
    "Runtime": "wasmext.runtime",
    "Session": "wasmext.session",
    "ToolGuidance": "wasmext.hooks.extensions",
    "Trace": "wasmext.session",
    "TraceEvent": "wasmext.session",
    "Tracing": "wasmext.observe.tracing",
    "TracingSettings": "wasmext.observe.tracing",
    "TransformResult": "wasmext.hooks.transform",
    "load_config": "wasmext.config",
    "load_policy": "wasmext.hooks.pipeline",
    "parse_policy": "wasmext.hooks.pipeline",
    "tune_gc": "wasmext.gctune",
}

if TYPE_CHECKING:  # the same names as mypy and editors see them (a test keeps them equal)
    from wasmext.aio import AsyncSession as AsyncSession
    from wasmext.config import HostConfig as HostConfig
    from wasmext.config import load_config as load_config
    from wasmext.gctune import tune_gc as tune_gc
    from wasmext.hooks.extensions import ExtensionResult as ExtensionResult
    from wasmext.hooks.extensions import Prompt as Prompt
    from wasmext.hooks.extensions import ToolGuidance as ToolGuidance
    from wasmext.hooks.lifecycle import LifecycleResult as LifecycleResult
    from wasmext.hooks.pipeline import PipelineResult as PipelineResult
    from wasmext.hooks.pipeline import Policy as Policy
    from wasmext.hooks.pipeline import load_policy as load_policy
    from wasmext.hooks.pipeline import parse_policy as parse_policy
    from wasmext.hooks.transform import TransformResult as TransformResult
    from wasmext.host import Host as Host
    from wasmext.lifecycle.reload import RescanReport as RescanReport
    from wasmext.observe.tracing import Tracing as Tracing
    from wasmext.observe.tracing import TracingSettings as TracingSettings
    from wasmext.runtime import Runtime as Runtime
    from wasmext.sandbox.cache import CompileCache as CompileCache
    from wasmext.sandbox.instance import CallResult as CallResult
    from wasmext.sandbox.limits import Limits as Limits
    from wasmext.sandbox.plugin import Plugin as Plugin
    from wasmext.session import Session as Session
    from wasmext.session import Trace as Trace
    from wasmext.session import TraceEvent as TraceEvent

# A library leaves logging to the application: without this, warnings would reach
# stderr through logging's last-resort handler in programs that configure nothing.
logging.getLogger("wasmext").addHandler(logging.NullHandler())

__all__ = sorted(["__version__", *_errors.__all__, *_LAZY])


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'wasmext' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain global
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
