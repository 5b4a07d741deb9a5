"""wasmext: a WebAssembly plugin host for Python.

    from wasmext import Runtime
    with Runtime() as rt:
        plugin = rt.load("plugins/pii-mask")
        print(plugin.call("on_plain_text", "mail me at a@b.example").value)

Untrusted plugins run in a wasmtime sandbox with fuel, memory, time and
host-call limits and deny-by-default capabilities; every failure is a named
error under `WasmextError`.
"""

# Importing the package loads nothing heavy: each public name is imported from
# its module on first use (PEP 562), so `import wasmext` and the CLI's `--help`
# start fast and a program pays only for the layers it touches.
import logging
from typing import TYPE_CHECKING, Any

from wasmext._version import __version__

if TYPE_CHECKING:  # the names as mypy and editors see them
    from wasmext._abi import ABI_MAJOR, ABI_MINOR
    from wasmext.config import HostConfig, load_config
    from wasmext.errors import (
        AbiMismatch,
        BundleError,
        Cancelled,
        CapabilityDenied,
        ConfigError,
        EncodeError,
        GuestTrap,
        HookAborted,
        HostCallLimitExceeded,
        InputTooLarge,
        InvalidModule,
        InvalidOutput,
        LoadError,
        ManifestError,
        McpAuthError,
        MemoryLimitExceeded,
        MiddlewareError,
        ModuleTooLarge,
        OutOfFuel,
        PipelineError,
        PluginError,
        PluginFault,
        Quarantined,
        SignatureInvalid,
        SignatureRequired,
        StackOverflow,
        Timeout,
        UnknownImport,
        UnsafeFile,
        UnsafeFolder,
        WasmextError,
    )
    from wasmext.hooks.extensions import ExtensionResult, Prompt, ToolGuidance
    from wasmext.hooks.lifecycle import LifecycleResult
    from wasmext.hooks.pipeline import PipelineResult, Policy, load_policy, parse_policy
    from wasmext.hooks.transform import TransformResult
    from wasmext.host import Host
    from wasmext.lifecycle.reload import RescanReport
    from wasmext.lifecycle.watch import PluginWatcher
    from wasmext.manifest import Manifest, load_manifest
    from wasmext.runtime import Runtime
    from wasmext.sandbox.cache import CompileCache
    from wasmext.sandbox.engine import EngineConfig
    from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError
    from wasmext.sandbox.instance import CallResult
    from wasmext.sandbox.limits import Limits
    from wasmext.sandbox.plugin import HookSpec, Plugin, QuarantinePolicy, Registration
    from wasmext.sandbox.wasmcheck import ModuleCaps
    from wasmext.services.agents import AgentRegistry
    from wasmext.services.http_fetch import HttpFetch, HttpLimits
    from wasmext.services.llm import Completer, LlmPolicy, LlmService, LlmSettings, Price
    from wasmext.services.llm_client import ChatAnswer, ChatRequest, ModelError
    from wasmext.session import Session, Trace, TraceEvent
    from wasmext.state import StateError, StateUnavailable

# A library leaves logging to the application: without this, warnings would reach
# stderr through logging's last-resort handler in programs that configure nothing.
logging.getLogger("wasmext").addHandler(logging.NullHandler())

__all__ = [
    "ABI_MAJOR",
    "ABI_MINOR",
    "AbiMismatch",
    "AgentRegistry",
    "BundleError",
    "CallContext",
    "CallResult",
    "Cancelled",
    "CapabilityDenied",
    "ChatAnswer",
    "ChatRequest",
    "CompileCache",
    "Completer",
    "ConfigError",
    "EncodeError",
    "EngineConfig",
    "ExtensionResult",
    "GuestTrap",
    "HookAborted",
    "HookSpec",
    "Host",
    "HostCallLimitExceeded",
    "HostConfig",
    "HostServices",
    "HttpFetch",
    "HttpLimits",
    "InputTooLarge",
    "InvalidModule",
    "InvalidOutput",
    "LifecycleResult",
    "Limits",
    "LlmPolicy",
    "LlmService",
    "LlmSettings",
    "LoadError",
    "Manifest",
    "ManifestError",
    "McpAuthError",
    "MemoryLimitExceeded",
    "MiddlewareError",
    "ModelError",
    "ModuleCaps",
    "ModuleTooLarge",
    "OpError",
    "OutOfFuel",
    "PipelineError",
    "PipelineResult",
    "Plugin",
    "PluginError",
    "PluginFault",
    "PluginWatcher",
    "Policy",
    "Price",
    "Prompt",
    "QuarantinePolicy",
    "Quarantined",
    "Registration",
    "RescanReport",
    "Runtime",
    "Session",
    "SignatureInvalid",
    "SignatureRequired",
    "StackOverflow",
    "StateError",
    "StateUnavailable",
    "Timeout",
    "ToolGuidance",
    "Trace",
    "TraceEvent",
    "TransformResult",
    "UnknownImport",
    "UnsafeFile",
    "UnsafeFolder",
    "WasmextError",
    "__version__",
    "load_config",
    "load_manifest",
    "load_policy",
    "parse_policy",
]

_LAZY: dict[str, str] = {
    "ABI_MAJOR": "wasmext._abi",
    "ABI_MINOR": "wasmext._abi",
    "HostConfig": "wasmext.config",
    "load_config": "wasmext.config",
    "AbiMismatch": "wasmext.errors",
    "BundleError": "wasmext.errors",
    "SignatureInvalid": "wasmext.errors",
    "SignatureRequired": "wasmext.errors",
    "Cancelled": "wasmext.errors",
    "CapabilityDenied": "wasmext.errors",
    "ConfigError": "wasmext.errors",
    "EncodeError": "wasmext.errors",
    "GuestTrap": "wasmext.errors",
    "HookAborted": "wasmext.errors",
    "HostCallLimitExceeded": "wasmext.errors",
    "InputTooLarge": "wasmext.errors",
    "InvalidModule": "wasmext.errors",
    "InvalidOutput": "wasmext.errors",
    "LoadError": "wasmext.errors",
    "ManifestError": "wasmext.errors",
    "McpAuthError": "wasmext.errors",
    "MemoryLimitExceeded": "wasmext.errors",
    "MiddlewareError": "wasmext.errors",
    "ModuleTooLarge": "wasmext.errors",
    "OutOfFuel": "wasmext.errors",
    "PipelineError": "wasmext.errors",
    "PluginError": "wasmext.errors",
    "PluginFault": "wasmext.errors",
    "Quarantined": "wasmext.errors",
    "StackOverflow": "wasmext.errors",
    "Timeout": "wasmext.errors",
    "UnknownImport": "wasmext.errors",
    "UnsafeFile": "wasmext.errors",
    "UnsafeFolder": "wasmext.errors",
    "WasmextError": "wasmext.errors",
    "ExtensionResult": "wasmext.hooks.extensions",
    "Prompt": "wasmext.hooks.extensions",
    "ToolGuidance": "wasmext.hooks.extensions",
    "LifecycleResult": "wasmext.hooks.lifecycle",
    "PipelineResult": "wasmext.hooks.pipeline",
    "Policy": "wasmext.hooks.pipeline",
    "load_policy": "wasmext.hooks.pipeline",
    "parse_policy": "wasmext.hooks.pipeline",
    "TransformResult": "wasmext.hooks.transform",
    "Host": "wasmext.host",
    "RescanReport": "wasmext.lifecycle.reload",
    "PluginWatcher": "wasmext.lifecycle.watch",
    "Manifest": "wasmext.manifest",
    "load_manifest": "wasmext.manifest",
    "Runtime": "wasmext.runtime",
    "CompileCache": "wasmext.sandbox.cache",
    "EngineConfig": "wasmext.sandbox.engine",
    "CallContext": "wasmext.sandbox.hostcalls",
    "HostServices": "wasmext.sandbox.hostcalls",
    "OpError": "wasmext.sandbox.hostcalls",
    "CallResult": "wasmext.sandbox.instance",
    "Limits": "wasmext.sandbox.limits",
    "HookSpec": "wasmext.sandbox.plugin",
    "Plugin": "wasmext.sandbox.plugin",
    "QuarantinePolicy": "wasmext.sandbox.plugin",
    "Registration": "wasmext.sandbox.plugin",
    "ModuleCaps": "wasmext.sandbox.wasmcheck",
    "AgentRegistry": "wasmext.services.agents",
    "HttpFetch": "wasmext.services.http_fetch",
    "HttpLimits": "wasmext.services.http_fetch",
    "Completer": "wasmext.services.llm",
    "LlmPolicy": "wasmext.services.llm",
    "LlmService": "wasmext.services.llm",
    "LlmSettings": "wasmext.services.llm",
    "Price": "wasmext.services.llm",
    "ChatAnswer": "wasmext.services.llm_client",
    "ChatRequest": "wasmext.services.llm_client",
    "ModelError": "wasmext.services.llm_client",
    "Session": "wasmext.session",
    "Trace": "wasmext.session",
    "TraceEvent": "wasmext.session",
    "StateError": "wasmext.state",
    "StateUnavailable": "wasmext.state",
}


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
