"""wasmext: a WebAssembly plugin host for Python.

    from wasmext import Runtime
    with Runtime() as rt:
        plugin = rt.load("plugins/pii-mask")
        print(plugin.call("on_plain_text", "mail me at a@b.example").value)

Untrusted plugins run in a wasmtime sandbox with fuel, memory, time and
host-call limits and deny-by-default capabilities; every failure is a named
error under `WasmextError`.
"""

__version__ = "0.1.0"

from wasmext._abi import ABI_MAJOR, ABI_MINOR
from wasmext.cache import CompileCache
from wasmext.engine import EngineConfig
from wasmext.errors import (
    AbiMismatch,
    CapabilityDenied,
    ConfigError,
    EncodeError,
    GuestTrap,
    HostCallLimitExceeded,
    InputTooLarge,
    InvalidModule,
    InvalidOutput,
    LoadError,
    ManifestError,
    MemoryLimitExceeded,
    OutOfFuel,
    PluginError,
    PluginFault,
    Quarantined,
    StackOverflow,
    Timeout,
    UnknownImport,
    WasmextError,
)
from wasmext.hostcalls import CallContext, HostServices, OpError
from wasmext.instance import CallResult
from wasmext.limits import Limits
from wasmext.manifest import Manifest, load_manifest
from wasmext.plugin import HookSpec, Plugin, QuarantinePolicy, Registration
from wasmext.runtime import Runtime

__all__ = [
    "ABI_MAJOR",
    "ABI_MINOR",
    "AbiMismatch",
    "CallContext",
    "CallResult",
    "CapabilityDenied",
    "CompileCache",
    "ConfigError",
    "EncodeError",
    "EngineConfig",
    "GuestTrap",
    "HookSpec",
    "HostCallLimitExceeded",
    "HostServices",
    "InputTooLarge",
    "InvalidModule",
    "InvalidOutput",
    "Limits",
    "LoadError",
    "Manifest",
    "ManifestError",
    "MemoryLimitExceeded",
    "OpError",
    "OutOfFuel",
    "Plugin",
    "PluginError",
    "PluginFault",
    "QuarantinePolicy",
    "Quarantined",
    "Registration",
    "Runtime",
    "StackOverflow",
    "Timeout",
    "UnknownImport",
    "WasmextError",
    "__version__",
    "load_manifest",
]
