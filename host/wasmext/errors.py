"""Every error wasmext raises, under one root.

    WasmextError
    ├── ConfigError                 bad host configuration
    ├── UnsafeFile                  (also an OSError) a file the host reads is a FIFO,
    │                               device, socket or folder, or over its size cap:
    │                               refused, never waited on (wasmext.files.read_regular)
    │   └── ManifestError           bad plugin.toml (names the file and field)
    ├── LoadError                   a module cannot become a plugin
    │   ├── InvalidModule           not WebAssembly, or does not compile
    │   │   └── ModuleTooLarge      over the host's compile caps (bytes, functions,
    │   │                           body size, code size), refused before compiling
    │   ├── AbiMismatch             wrong ABI version or missing/mistyped exports
    │   ├── UnknownImport           imports something the host does not offer
    │   ├── UnsafeFolder            a plugin folder that is, or holds, a symlink out of it
    │   └── BundleError             a .wxb bundle refused (wasmext.lifecycle.bundle):
    │       ├── BundlePathTraversal     an entry name with '..' (zip-slip)
    │       ├── BundleAbsolutePath      an entry name that is absolute (or a drive)
    │       ├── BundleLinkEntry         a symlink or hard link (in the bundle or the folder)
    │       ├── BundleDeviceEntry       a device, fifo, socket or directory entry
    │       ├── BundleDuplicateEntry    two entries with the same name
    │       ├── BundleTooLarge          declared or real size, or compression ratio, over cap
    │       ├── BundleTooManyEntries    more entries than a plugin bundle has
    │       ├── BundleDigestMismatch    the digest manifest lies or does not cover a file
    │       ├── BundleDowngrade         older than the installed version (--allow-downgrade)
    │       ├── SignatureRequired       unsigned, and the host requires a signature
    │       └── SignatureInvalid        a bad signature, or a key the host does not trust
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
    ├── McpAuthError                an MCP server's OAuth authorization failed
    ├── MiddlewareError             a middleware layer broke the next() rule
    ├── HookAborted                 a fail-closed plugin failed: the operation stops
    └── PipelineError               a required pipeline stage failed or a validator blocked

Each error carries `plugin_id` and `hook` where they are known, and a short
`reason` (e.g. "out of fuel") that the command line prints. Guest-written text
(a `PluginError`'s code and message) arrives here already redacted and cleaned
by the sandbox (`PluginLog.scrub`); `describe()` cleans its whole line once more
(`wasmext.text.clean`), so it is always one inert line of bounded length.
"""

from __future__ import annotations

import os
from pathlib import Path

from wasmext.text import CAP, clean

DESCRIBE_CAP = CAP + 256  # a cleaned message plus who, where and why

__all__ = [
    "AbiMismatch",
    "BundleAbsolutePath",
    "BundleDeviceEntry",
    "BundleDigestMismatch",
    "BundleDowngrade",
    "BundleDuplicateEntry",
    "BundleError",
    "BundleLinkEntry",
    "BundlePathTraversal",
    "BundleTooLarge",
    "BundleTooManyEntries",
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
    "McpAuthError",
    "MemoryLimitExceeded",
    "MiddlewareError",
    "ModuleTooLarge",
    "OutOfFuel",
    "PipelineError",
    "PluginError",
    "PluginFault",
    "Quarantined",
    "SignatureInvalid",
    "SignatureRequired",
    "StackOverflow",
    "Timeout",
    "UnknownImport",
    "UnsafeFile",
    "UnsafeFolder",
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
        return clean(f"{who}{where}: {self.reason}: {self.message}", DESCRIBE_CAP)


class ConfigError(WasmextError):
    """A configuration that cannot be used; `problems` lists (field path, reason) pairs."""

    reason = "config"

    def __init__(self, message: str, *, plugin_id: str | None = None, hook: str | None = None,
                 problems: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message, plugin_id=plugin_id, hook=hook)
        self.problems = problems


class ManifestError(ConfigError):
    reason = "manifest"

    def __init__(self, message: str, *, path: Path | None = None, field: str | None = None,
                 plugin_id: str | None = None) -> None:
        super().__init__(message, plugin_id=plugin_id)
        self.path = path
        self.field = field


class UnsafeFile(WasmextError, OSError):
    """A file the host reads is not a regular file, or is larger than its cap.

    An OSError too, so every reader that reports an unreadable file by its
    `strerror` reports this one the same way, with the reason in `strerror`."""

    reason = "unsafe file"

    def __init__(self, path: str | os.PathLike[str], problem: str, *,
                 too_large: bool = False) -> None:
        super().__init__(f"{path}: {problem}")
        self.strerror = problem
        self.filename = str(path)
        self.too_large = too_large

    def __str__(self) -> str:
        return self.message


class LoadError(WasmextError):
    reason = "load"


class InvalidModule(LoadError):
    reason = "invalid module"


class ModuleTooLarge(InvalidModule):
    """Compiling it would cost more than the host's `ModuleCaps` allow."""

    reason = "module too large"


class AbiMismatch(LoadError):
    reason = "abi"


class UnknownImport(LoadError):
    reason = "unknown import"


class UnsafeFolder(LoadError):
    reason = "unsafe folder"


class PluginFault(WasmextError):
    reason = "fault"


class OutOfFuel(PluginFault):
    reason = "out of fuel"


class MemoryLimitExceeded(PluginFault):
    reason = "memory limit"


class Timeout(PluginFault):
    reason = "timeout"
    # True when the deadline was the calling plugin's (a nested call ran out of
    # its caller's time): the call failed, but it is not this plugin's fault.
    inherited = False


class Cancelled(PluginFault):
    """The call's caller cancelled it (an MCP client's `notifications/cancelled`,
    a `CallScope.cancel()`): the guest was interrupted; not the plugin's fault."""

    reason = "cancelled"
    inherited = True  # as a Timeout of the caller's: no fault record, no quarantine


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
        return clean(f"plugin {self.plugin_id} hook {self.hook}: {self.code}: {self.message}",
                     DESCRIBE_CAP)


class CapabilityDenied(WasmextError):
    reason = "capability denied"


class InputTooLarge(WasmextError):
    reason = "input too large"


class EncodeError(WasmextError):
    reason = "encode"


class Quarantined(WasmextError):
    reason = "quarantined"


class McpAuthError(WasmextError):
    reason = "mcp auth"


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


class BundleError(LoadError):
    """A .wxb bundle (or an installed bundle's folder) that is refused."""

    reason = "bundle"


class BundlePathTraversal(BundleError):
    reason = "bundle path traversal"


class BundleAbsolutePath(BundleError):
    reason = "bundle absolute path"


class BundleLinkEntry(BundleError):
    reason = "bundle link"


class BundleDeviceEntry(BundleError):
    reason = "bundle special file"


class BundleDuplicateEntry(BundleError):
    reason = "bundle duplicate entry"


class BundleTooLarge(BundleError):
    reason = "bundle too large"


class BundleTooManyEntries(BundleError):
    reason = "bundle too many entries"


class BundleDigestMismatch(BundleError):
    reason = "bundle digest mismatch"


class BundleDowngrade(BundleError):
    reason = "bundle downgrade"


class SignatureRequired(BundleError):
    reason = "signature required"


class SignatureInvalid(BundleError):
    reason = "signature invalid"
