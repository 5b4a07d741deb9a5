"""Every error wasmext raises, under one root.

    WasmextError
    ├── ConfigError                 bad host configuration
    │   └── ManifestError           bad plugin.toml (names the file and field)
    ├── LoadError                   a module cannot become a plugin
    │   ├── InvalidModule           not WebAssembly, or does not compile
    │   ├── AbiMismatch             wrong ABI version or missing/mistyped exports
    │   └── UnknownImport           imports something the host does not offer
    ├── PluginFault                 the plugin misbehaved during a call (counts
    │   │                           towards quarantine; the host keeps serving)
    │   ├── OutOfFuel
    │   ├── MemoryLimitExceeded
    │   ├── Timeout
    │   ├── StackOverflow
    │   ├── InvalidOutput           bad ptr/len, oversize, hostile MessagePack
    │   ├── HostCallLimitExceeded   too many host calls, or too long in the host
    │   └── GuestTrap               any other trap (unreachable, bad access, ...)
    ├── PluginError                 the plugin answered {"ok": false}: a clean,
    │                               reported failure, not a fault
    ├── CapabilityDenied            the plugin was not granted what it asked for
    ├── InputTooLarge               the host's own request exceeds the input cap
    ├── EncodeError                 host data that MessagePack cannot carry
    ├── Quarantined                 calls refused until the quarantine ends
    ├── StateError                  (wasmext.state) a state operation failed; `code`
    │   │                           is its ABI answer (limit, conflict, invalid, ...)
    │   └── StateUnavailable        the host's storage (Redis, the SQLite file) is down,
    │                               frozen or locked past the call's deadline: the
    │                               host's trouble, never a PluginFault; the instance
    │                               is kept and nothing counts towards quarantine
    ├── MiddlewareError             a middleware layer broke the next() rule
    ├── HookAborted                 a fail-closed plugin failed: the operation stops
    └── PipelineError               a required pipeline stage failed or a validator blocked

Each error carries `plugin_id` and `hook` where they are known, and a short
`reason` (e.g. "out of fuel") that the command line prints.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "AbiMismatch",
    "CapabilityDenied",
    "ConfigError",
    "EncodeError",
    "GuestTrap",
    "HookAborted",
    "HostCallLimitExceeded",
    "InputTooLarge",
    "InvalidModule",
    "InvalidOutput",
    "LoadError",
    "ManifestError",
    "MemoryLimitExceeded",
    "MiddlewareError",
    "OutOfFuel",
    "PipelineError",
    "PluginError",
    "PluginFault",
    "Quarantined",
    "StackOverflow",
    "Timeout",
    "UnknownImport",
    "WasmextError",
]


class WasmextError(Exception):
    """Root of every wasmext error."""

    reason = "error"

    def __init__(self, message: str, *, plugin_id: str | None = None,
                 hook: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.plugin_id = plugin_id
        self.hook = hook

    def describe(self) -> str:
        """One line naming the plugin, the hook and the reason."""
        who = f"plugin {self.plugin_id}" if self.plugin_id else "wasmext"
        where = f" hook {self.hook}" if self.hook else ""
        return f"{who}{where}: {self.reason}: {self.message}"


class ConfigError(WasmextError):
    reason = "config"


class ManifestError(ConfigError):
    reason = "manifest"

    def __init__(self, message: str, *, path: Path | None = None, field: str | None = None,
                 plugin_id: str | None = None) -> None:
        super().__init__(message, plugin_id=plugin_id)
        self.path = path
        self.field = field


class LoadError(WasmextError):
    reason = "load"


class InvalidModule(LoadError):
    reason = "invalid module"


class AbiMismatch(LoadError):
    reason = "abi"


class UnknownImport(LoadError):
    reason = "unknown import"


class PluginFault(WasmextError):
    reason = "fault"


class OutOfFuel(PluginFault):
    reason = "out of fuel"


class MemoryLimitExceeded(PluginFault):
    reason = "memory limit"


class Timeout(PluginFault):
    reason = "timeout"


class StackOverflow(PluginFault):
    reason = "stack overflow"


class InvalidOutput(PluginFault):
    reason = "invalid output"


class HostCallLimitExceeded(PluginFault):
    reason = "host call limit"


class GuestTrap(PluginFault):
    reason = "trap"


class PluginError(WasmextError):
    """The guest reported a failure with an ABI error code."""

    reason = "plugin error"

    def __init__(self, message: str, *, code: str, plugin_id: str | None = None,
                 hook: str | None = None) -> None:
        super().__init__(message, plugin_id=plugin_id, hook=hook)
        self.code = code

    def describe(self) -> str:
        return f"plugin {self.plugin_id} hook {self.hook}: {self.code}: {self.message}"


class CapabilityDenied(WasmextError):
    reason = "capability denied"


class InputTooLarge(WasmextError):
    reason = "input too large"


class EncodeError(WasmextError):
    reason = "encode"


class Quarantined(WasmextError):
    reason = "quarantined"


class MiddlewareError(WasmextError):
    reason = "middleware"


class HookAborted(WasmextError):
    """A fail-closed plugin failed; `cause` is its error."""

    reason = "aborted"

    def __init__(self, message: str, *, cause: WasmextError | None = None,
                 plugin_id: str | None = None, hook: str | None = None) -> None:
        super().__init__(message, plugin_id=plugin_id, hook=hook)
        self.cause = cause


class PipelineError(WasmextError):
    reason = "pipeline"
