"""wasmext: a WebAssembly plugin host for Python.

    from wasmext import Runtime
    with Runtime() as rt:
        plugin = rt.load("plugins/pii-mask")
        print(plugin.call("on_plain_text", "mail me at a@b.example").value)

Untrusted plugins run in a wasmtime sandbox with fuel, memory, time and
host-call limits and deny-by-default capabilities; every failure is a named
error under `WasmextError`.
"""

from wasmext._abi import ABI_MAJOR, ABI_MINOR
from wasmext._version import __version__
from wasmext.config import HostConfig, load_config
from wasmext.errors import (
    AbiMismatch,
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
    MemoryLimitExceeded,
    MiddlewareError,
    ModuleTooLarge,
    OutOfFuel,
    PipelineError,
    PluginError,
    PluginFault,
    Quarantined,
    StackOverflow,
    Timeout,
    UnknownImport,
    UnsafeFolder,
    WasmextError,
)
from wasmext.hooks.extensions import ExtensionResult, Prompt, ToolGuidance
from wasmext.hooks.lifecycle import LifecycleResult
from wasmext.hooks.pipeline import PipelineResult, Policy, load_policy, parse_policy
from wasmext.hooks.transform import TransformResult
from wasmext.host import Host
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

__all__ = [
    "ABI_MAJOR",
    "ABI_MINOR",
    "AbiMismatch",
    "AgentRegistry",
    "CallContext",
    "CallResult",
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
    "Policy",
    "Price",
    "Prompt",
    "QuarantinePolicy",
    "Quarantined",
    "Registration",
    "Runtime",
    "Session",
    "StackOverflow",
    "StateError",
    "StateUnavailable",
    "Timeout",
    "ToolGuidance",
    "Trace",
    "TraceEvent",
    "TransformResult",
    "UnknownImport",
    "UnsafeFolder",
    "WasmextError",
    "__version__",
    "load_config",
    "load_manifest",
    "load_policy",
    "parse_policy",
]
