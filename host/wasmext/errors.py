"""Every error wasmext raises, under one root.

    WasmextError
    ├── ConfigError                 bad host configuration
    │   ├── ManifestError           bad plugin.toml (names the file and field)
    │   ├── ToolLimitError          (services.tools) a plugin's tool over a cap: tools
    │   │                           per plugin, schema size or depth (at load or at
    │   │                           runtime, `tool.register`)
    │   ├── ConfigTextError         a config file too large, too deep or not parseable
    │   │                           (also a ValueError; callers map it to one of the above)
    │   ├── TranscriptError         (models) a `wasmext run` transcript that cannot be
    │   │                           played: names the file, line and field
    │   └── NotInstalled            a plugin id no plugin folder holds (uninstall, and the
    │                               CLI's grant and revoke: one exit code for it)
    ├── UnsafeFile                  (also an OSError) a file the host reads is a FIFO,
    │                               device, socket or folder, or over its size cap:
    │                               refused, never waited on (wasmext.files.read_regular)
    ├── LoadError                   a module cannot become a plugin
    │   ├── InvalidModule           not WebAssembly, or does not compile
    │   │   └── ModuleTooLarge      over the host's compile caps (bytes, functions,
    │   │                           body size, code size), refused before compiling
    │   ├── AbiMismatch             wrong ABI version or missing/mistyped exports
    │   ├── UnknownImport           imports something the host does not offer
    │   ├── UnknownHook             registers a name one typo from a hook the host calls
    │   ├── UnsafeFolder            a plugin folder that is, or holds, a symlink out of it
    │   ├── RemoteRegistrationRefused   (wasmext.cluster) a worker's advertised
    │   │                           registration refused as a guest's would be, or
    │   │                           not the plugin configured
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
    ├── RegistryError               (lifecycle.oci) an OCI registry pull or push refused
    │   │                           or failed: a bad reference, an answer that is not
    │   │                           a wasmext plugin artifact, a refused request
    │   ├── RegistryInsecure        plain http to a registry that is not on loopback,
    │   │                           without --insecure
    │   ├── RegistryTimeout         the registry did not finish within the deadline
    │   ├── RegistryTooLarge        a manifest or layer over its cap, declared or streamed
    │   └── RegistryDigestMismatch  a manifest or layer that does not match its digest
    ├── PluginFault                 the plugin misbehaved during a call (counts
    │   │                           towards quarantine; the host keeps serving)
    │   ├── OutOfFuel
    │   ├── MemoryLimitExceeded
    │   ├── Timeout                 `inherited` when the deadline was the caller's
    │   ├── Cancelled               the caller cancelled the call (never counted)
    │   ├── StackOverflow
    │   ├── InvalidOutput           bad ptr/len, oversize, hostile MessagePack
    │   ├── HostCallLimitExceeded   too many host calls, or too long in the host
    │   ├── BlockingWaitDenied      a component asked WASI to wait on a clock
    │   ├── GuestTrap               any other trap (unreachable, bad access, ...)
    │   └── RemoteUnavailable       (wasmext.cluster) no worker answered a remote
    │                               plugin's call: none serves it, or each attempt
    │                               went unanswered (a worker killed mid-call)
    ├── PluginError                 the plugin answered {"ok": false}: a clean,
    │                               reported failure, not a fault
    ├── CapabilityDenied            the plugin was not granted what it asked for
    ├── InputTooLarge               the host's own request exceeds the input cap
    ├── EncodeError                 host data that MessagePack cannot carry
    ├── DecodeError                 bytes that are not an acceptable ABI document
    │                               (also a ValueError)
    ├── Quarantined                 calls refused until the quarantine ends
    ├── InstancePoolFull            (sandbox.engine) more instances alive at once than
    │                               the engine's `instance_pool` holds: the host's
    │                               limit, never a PluginFault (no quarantine)
    ├── MetricRefused               (observe.pluginmetrics) a metric declaration the
    │   │                           host refuses: bad name, kind, labels or buckets
    │   └── MetricLimit             over a cap: metrics per plugin, labels, series
    ├── ManageRefused               (mcp.server.manage) an MCP management request refused:
    │                               a path outside the allowed folders, an unknown
    │                               plugin, no folder to install into
    ├── WitTypeRefused              (sandbox.backends.wit_tools) an exported WIT function
    │                               not offered as a tool: a type with no JSON form,
    │                               too many parts, too deep, a bad name
    ├── WitValueRefused             (sandbox.backends.wit_tools) a JSON value its WIT type
    │                               does not allow (also a ValueError)
    ├── TickRefused                 (services.ticks) an `on_tick` request refused: not a
    │                               positive interval, or too many plugins tick
    ├── OpError                     a host op's clean failure: `code` and message are
    │   │                           answered to the guest as {"ok": false, ...}
    │   └── AgentRunNotStarted      (services.agents) the OS would not start a thread for
    │                               an agent run: answered `unavailable`, never "closing"
    ├── Refused                     (services.http.guard) a URL the plugin may not reach,
    │                               or a fetch over its caps; `code` is the ABI answer
    ├── OutOfTime                   (sandbox.calltree) the call tree's time ran out
    │                               before a host function answered
    ├── StateError                  (wasmext.state) a state operation failed; `code`
    │   │                           is its ABI answer (limit, conflict, invalid, ...)
    │   ├── InvalidKey              not a usable key (empty, NUL, not UTF-8)
    │   ├── InvalidArgument         a bad value, TTL, scope or id
    │   ├── QuotaExceeded           a write over a limit; nothing written
    │   │   ├── SessionQuotaExceeded
    │   │   ├── TooManyKeys
    │   │   └── KeyTooLong
    │   ├── CasConflict             a compare-and-set precondition did not hold
    │   ├── TransactionClosed       used after commit or rollback (a host bug)
    │   └── StateUnavailable        the host's storage (Redis, the SQLite file) is down,
    │       │                       frozen or locked past the call's deadline: the
    │       │                       host's trouble, never a PluginFault; the instance
    │       │                       is kept and nothing counts towards quarantine
    │       └── StateForked         a forked child's store that another thread of the
    │                               parent was using at the fork: refused at once
    ├── EventError                  (wasmext.observe) an event operation refused; `code`
    │   │                           is its ABI answer
    │   ├── InvalidTopic            not a dot-separated topic or pattern
    │   ├── EventDenied             a topic the plugin was not granted (also a
    │   │                           CapabilityDenied)
    │   ├── RateLimited             over the emitter's event rate
    │   ├── CascadeLimit            events causing events, too deep
    │   ├── TooManySubscriptions    a plugin's subscriptions over the bus's cap
    │   └── BusClosed               the bus is shut down
    ├── ModelError                  (services.llm.client) a chat completion failed;
    │                               `timed_out` says whether it was the deadline
    ├── McpAuthError                an MCP server's OAuth authorization failed
    ├── McpToolError                an MCP server's tool answered with an error
    │                               (also a RuntimeError)
    ├── ContractError               (wasmext.cluster) a NATS message that is not the
    │                               contract: unknown key, wrong type, too big
    ├── NatsUnavailable             the NATS server cannot be reached
    │   ├── NatsAuthFailed          the server refused the login (token, user,
    │   │                           password, nkey or credentials), at once
    │   └── NatsLinkForked          (cluster.link) a link opened on the parent's event
    │                               loop, used in a forked child: refused at once
    ├── MiddlewareError             a middleware layer broke the next() rule
    ├── ActivationError             (hooks.activations) an output-extension activation
    │                               refused: bad name, unknown extension or param,
    │                               or user extensions switched off
    ├── HookAborted                 a fail-closed plugin failed: the operation stops
    └── PipelineError               a required pipeline stage failed or a validator blocked

Every exception class of the package is defined here (the modules that raise
them import them from here; tests/test_errors_tree.py checks the drawing).
Third-party exceptions (wasmtime traps, msgpack, httpx, nats, redis, sqlite3,
the MCP SDK's) are mapped to these where they enter: one boundary each.

Each error carries `plugin_id` and `hook` where they are known, and a short
`reason` (e.g. "out of fuel") that the command line prints. Guest-written text
(a `PluginError`'s code and message) arrives here already redacted and cleaned
by the sandbox (`PluginLog.scrub`); `describe()` cleans its whole line once more
(`wasmext.text.clean`), so it is always one inert line of bounded length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wasmext.text import CAP, clean

if TYPE_CHECKING:
    import os
    from pathlib import Path

DESCRIBE_CAP = CAP + 256  # a cleaned message plus who, where and why

__all__ = [
    "AbiMismatch",
    "ActivationError",
    "AgentRunNotStarted",
    "BlockingWaitDenied",
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
    "BusClosed",
    "Cancelled",
    "CapabilityDenied",
    "CasConflict",
    "CascadeLimit",
    "ConfigError",
    "ConfigTextError",
    "ContractError",
    "DecodeError",
    "EncodeError",
    "EventDenied",
    "EventError",
    "GuestTrap",
    "HookAborted",
    "HostCallLimitExceeded",
    "InputTooLarge",
    "InstancePoolFull",
    "InvalidArgument",
    "InvalidKey",
    "InvalidModule",
    "InvalidOutput",
    "InvalidTopic",
    "KeyTooLong",
    "LoadError",
    "ManageRefused",
    "ManifestError",
    "McpAuthError",
    "McpToolError",
    "MemoryLimitExceeded",
    "MetricLimit",
    "MetricRefused",
    "MiddlewareError",
    "ModelError",
    "ModuleTooLarge",
    "NatsAuthFailed",
    "NatsLinkForked",
    "NatsUnavailable",
    "NotInstalled",
    "OpError",
    "OutOfFuel",
    "OutOfTime",
    "PipelineError",
    "PluginError",
    "PluginFault",
    "Quarantined",
    "QuotaExceeded",
    "RateLimited",
    "Refused",
    "RegistryDigestMismatch",
    "RegistryError",
    "RegistryInsecure",
    "RegistryTimeout",
    "RegistryTooLarge",
    "RemoteRegistrationRefused",
    "RemoteUnavailable",
    "SessionQuotaExceeded",
    "SignatureInvalid",
    "SignatureRequired",
    "StackOverflow",
    "StateError",
    "StateForked",
    "StateUnavailable",
    "TickRefused",
    "Timeout",
    "TooManyKeys",
    "TooManySubscriptions",
    "ToolLimitError",
    "TransactionClosed",
    "TranscriptError",
    "UnknownHook",
    "UnknownImport",
    "UnsafeFile",
    "UnsafeFolder",
    "WasmextError",
    "WitTypeRefused",
    "WitValueRefused",
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
        # A message that begins by naming the plugin (settings, manifests) does not say
        # it twice: `plugin kb: config: unknown setting ...`.
        message = self.message.removeprefix(f"{who}: ") if self.plugin_id else self.message
        return clean(f"{who}{where}: {self.reason}: {message}", DESCRIBE_CAP)


class ConfigError(WasmextError):
    """A configuration that cannot be used; `problems` lists (field path, reason) pairs."""

    reason = "config"

    def __init__(self, message: str, *, plugin_id: str | None = None, hook: str | None = None,
                 problems: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message, plugin_id=plugin_id, hook=hook)
        self.problems = problems


class ManifestError(ConfigError):
    """A bad plugin.toml; names the file and the field where known."""

    reason = "manifest"

    def __init__(self, message: str, *, path: Path | None = None, field: str | None = None,
                 plugin_id: str | None = None) -> None:
        super().__init__(message, plugin_id=plugin_id)
        self.path = path
        self.field = field


class ToolLimitError(ConfigError):
    """A plugin's tool over a cap: tools per plugin, schema size or nesting depth."""

    reason = "tool limit"


class TranscriptError(ConfigError):
    """A session transcript that cannot be played; names the file, the line and the field."""

    reason = "transcript"


class NotInstalled(ConfigError):
    """A plugin id that no plugin folder holds and no host has loaded."""

    reason = "not installed"

    def describe(self) -> str:
        """The message alone: it names the plugin and says it is not installed (the
        prefixes would say both again, and `config:` of a config that is fine)."""
        return clean(self.message, DESCRIBE_CAP)


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
    """A module cannot become a plugin."""

    reason = "load"


class InvalidModule(LoadError):
    """Not WebAssembly, or it does not compile."""

    reason = "invalid module"


class ModuleTooLarge(InvalidModule):
    """Compiling it would cost more than the host's `ModuleCaps` allow."""

    reason = "module too large"


class AbiMismatch(LoadError):
    """A wrong ABI version, or exports missing or of the wrong type."""

    reason = "abi"


class UnknownImport(LoadError):
    """The module imports something the host does not offer."""

    reason = "unknown import"


class UnknownHook(LoadError):
    """A registration names a hook the host does not call but nearly does: a typo."""

    reason = "unknown hook"


class UnsafeFolder(LoadError):
    """A plugin folder that is, or holds, a symlink out of it."""

    reason = "unsafe folder"


class RemoteRegistrationRefused(LoadError):
    """A worker's advertised registration for a remote plugin, refused: it fails the
    checks a guest's registration map gets, or names another plugin."""

    reason = "remote registration"


class PluginFault(WasmextError):
    """The plugin misbehaved during a call; counts towards quarantine."""

    reason = "fault"


class OutOfFuel(PluginFault):
    """The call used up its fuel."""

    reason = "out of fuel"


class MemoryLimitExceeded(PluginFault):
    """The guest grew its memory past the limit."""

    reason = "memory limit"


class Timeout(PluginFault):
    """The call ran past its deadline."""

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
    """The guest overflowed its stack."""

    reason = "stack overflow"


class InvalidOutput(PluginFault):
    """The guest's output is unusable: bad ptr/len, oversize or hostile MessagePack."""

    reason = "invalid output"


class HostCallLimitExceeded(PluginFault):
    """Too many host calls in one call, or too long spent in the host."""

    reason = "host call limit"


class BlockingWaitDenied(PluginFault):
    """A component subscribed to WASI's monotonic clock (a sleep, a timed poll).

    wasmtime's WASI preview 2 waits inside host code, where neither the call's
    deadline nor a cancel reaches, so the host offers no clock a guest can wait on.
    """

    reason = "blocking wait denied"


class GuestTrap(PluginFault):
    """Any other trap of the guest (unreachable, bad memory access, ...)."""

    reason = "trap"


class RemoteUnavailable(PluginFault):
    """No worker answered a remote plugin's call (none serves it, or every attempt went
    unanswered): counts towards the proxy's quarantine as a fault would."""

    reason = "remote unavailable"


class PluginError(WasmextError):
    """The guest reported a failure with an ABI error code."""

    reason = "plugin error"

    def __init__(self, message: str, *, code: str, plugin_id: str | None = None,
                 hook: str | None = None, suggestion: str | None = None,
                 help_url: str | None = None) -> None:
        super().__init__(message, plugin_id=plugin_id, hook=hook)
        self.code = code
        # What the guest said the user could do, and where to read more (SPEC 3):
        # scrubbed guest text, carried to tool results and turn reports.
        self.suggestion = suggestion
        self.help_url = help_url

    def describe(self) -> str:
        return clean(f"plugin {self.plugin_id} hook {self.hook}: {self.code}: {self.message}",
                     DESCRIBE_CAP)


class CapabilityDenied(WasmextError):
    """The plugin was not granted what it asked for."""

    reason = "capability denied"


class InputTooLarge(WasmextError):
    """The host's own request exceeds the plugin's input cap."""

    reason = "input too large"


class EncodeError(WasmextError):
    """Host data that MessagePack cannot carry."""

    reason = "encode"


class Quarantined(WasmextError):
    """Calls to the plugin are refused until its quarantine ends, `seconds_left` after
    the refusal (None when not known: a worker's refusal relayed)."""

    reason = "quarantined"

    def __init__(self, message: str, *, plugin_id: str | None = None, hook: str | None = None,
                 seconds_left: float | None = None) -> None:
        super().__init__(message, plugin_id=plugin_id, hook=hook)
        self.seconds_left = seconds_left


class InstancePoolFull(WasmextError):
    """No free slot in the engine's instance pool: more core-module instances alive at
    once, in the whole process, than `[host] instance_pool` (sandbox.engine). The host's
    capacity, not the plugin's fault: nothing counts towards quarantine."""

    reason = "instance pool full"


class McpAuthError(WasmextError):
    """An MCP server's OAuth authorization failed."""

    reason = "mcp auth"


class MiddlewareError(WasmextError):
    """A middleware layer broke the next() rule."""

    reason = "middleware"


class HookAborted(WasmextError):
    """A fail-closed plugin failed; `cause` is its error."""

    reason = "aborted"

    def __init__(self, message: str, *, cause: WasmextError | None = None,
                 plugin_id: str | None = None, hook: str | None = None) -> None:
        super().__init__(message, plugin_id=plugin_id, hook=hook)
        self.cause = cause

    def describe(self) -> str:
        """The plugin and hook once, then why the call failed (its cause's reason and
        message); the message names them itself for a reader of `str(err)`."""
        if self.cause is None or not self.plugin_id or not self.hook:
            return super().describe()
        why = getattr(self.cause, "code", None) or self.cause.reason
        return clean(f"plugin {self.plugin_id} hook {self.hook}: aborted, the plugin is "
                     f"fail-closed: {why}: {self.cause.message}", DESCRIBE_CAP)


class PipelineError(WasmextError):
    """A required pipeline stage failed or a validator blocked."""

    reason = "pipeline"


class BundleError(LoadError):
    """A .wxb bundle (or an installed bundle's folder) that is refused."""

    reason = "bundle"


class BundlePathTraversal(BundleError):
    """A bundle entry name with '..' (zip-slip)."""

    reason = "bundle path traversal"


class BundleAbsolutePath(BundleError):
    """A bundle entry name that is absolute (or names a drive)."""

    reason = "bundle absolute path"


class BundleLinkEntry(BundleError):
    """A symlink or hard link, in the bundle or the installed folder."""

    reason = "bundle link"


class BundleDeviceEntry(BundleError):
    """A device, fifo, socket or directory entry in a bundle."""

    reason = "bundle special file"


class BundleDuplicateEntry(BundleError):
    """Two bundle entries with the same name."""

    reason = "bundle duplicate entry"


class BundleTooLarge(BundleError):
    """A bundle's declared or real size, or compression ratio, over the cap."""

    reason = "bundle too large"


class BundleTooManyEntries(BundleError):
    """More entries than a plugin bundle has."""

    reason = "bundle too many entries"


class BundleDigestMismatch(BundleError):
    """The bundle's digest manifest lies or does not cover a file."""

    reason = "bundle digest mismatch"


class BundleDowngrade(BundleError):
    """A bundle older than the installed version (allowed with --allow-downgrade)."""

    reason = "bundle downgrade"


class SignatureRequired(BundleError):
    """An unsigned bundle where the host requires a signature."""

    reason = "signature required"


class SignatureInvalid(BundleError):
    """A bad signature, or one by a key the host does not trust."""

    reason = "signature invalid"


class RegistryError(WasmextError):
    """An OCI registry pull or push that is refused or fails."""

    reason = "registry"


class RegistryInsecure(RegistryError):
    """Plain http to a registry off loopback, without --insecure."""

    reason = "registry insecure"


class RegistryTimeout(RegistryError):
    """The registry did not finish within the deadline."""

    reason = "registry timeout"


class RegistryTooLarge(RegistryError):
    """A manifest or layer over its cap, as declared or as streamed."""

    reason = "registry too large"


class RegistryDigestMismatch(RegistryError):
    """A manifest or layer whose bytes do not match their digest."""

    reason = "registry digest mismatch"


# -- configuration text, codec, host ops ----------------------------------------------------

class ConfigTextError(ConfigError, ValueError):
    """A configuration file that is too large, too deep or not parseable."""

    reason = "config text"


class DecodeError(WasmextError, ValueError):
    """The bytes are not an acceptable ABI document; the message says why."""

    reason = "decode"


class MetricRefused(WasmextError):
    """A metric declaration (registration map "metrics") the host refuses."""

    reason = "metric refused"


class MetricLimit(MetricRefused):
    """More metrics, labels or series than the host's policy allows a plugin."""

    reason = "metric limit"


class ManageRefused(WasmextError):
    """A request of the MCP management tools refused; the message says why."""

    reason = "manage refused"


class WitTypeRefused(WasmextError):
    """An exported WIT function the host cannot offer as a tool; the message says why."""

    reason = "wit type refused"


class WitValueRefused(WasmextError, ValueError):
    """A JSON value its WIT type does not allow (or a guest answer with no JSON form)."""

    reason = "wit value refused"


class TickRefused(WasmextError):
    """A plugin's request for periodic `on_tick` calls that the host refuses."""

    reason = "tick refused"


class OpError(WasmextError):
    """An op's clean failure, answered to the guest as {"ok": false, "error": ...}."""

    reason = "op failed"

    def __init__(self, code: str, message: str, capability: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        # A `denied` one's grant that alone would allow it, when the host can name it
        # safely (the operator's notice says how to grant it).
        self.capability = capability


class AgentRunNotStarted(OpError):
    """The OS refused a thread for an agent run (too many threads, no memory): the
    run never started; answered to the guest as `unavailable`."""

    reason = "agent run not started"

    def __init__(self, message: str) -> None:
        super().__init__("unavailable", message)


class Refused(WasmextError):
    """A URL the plugin may not reach; `code` is the ABI error code."""

    reason = "refused"

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class OutOfTime(WasmextError):
    """The call tree's time ran out before a host function answered."""

    reason = "out of time"


# -- state (wasmext.state) ------------------------------------------------------------------

class StateError(WasmextError):
    """Root of state errors; `code` is the ABI error code a state op answers."""

    reason = "state"
    code = "internal"


class InvalidKey(StateError):
    """Not a usable key: not a str, empty, a NUL character, or not encodable as UTF-8."""

    reason = "invalid state key"
    code = "invalid"


class InvalidArgument(StateError):
    """A bad value, TTL, scope or id (for example the session scope without a session)."""

    reason = "invalid state argument"
    code = "invalid"


class QuotaExceeded(StateError):
    """A write would exceed a limit; nothing was written. Root of every limit error."""

    reason = "state quota"
    code = "limit"


class SessionQuotaExceeded(QuotaExceeded):
    """The session scope's byte quota would be exceeded."""

    reason = "session state quota"


class TooManyKeys(QuotaExceeded):
    """The scope's key count would be exceeded."""

    reason = "too many state keys"


class KeyTooLong(QuotaExceeded):
    """The key is over the key-length limit."""

    reason = "state key too long"


class CasConflict(StateError):
    """A compare-and-set precondition did not hold; nothing was written."""

    reason = "state conflict"
    code = "conflict"


class StateUnavailable(StateError):
    """The backing service (Redis, the SQLite file) cannot be reached or stays locked."""

    reason = "state unavailable"
    code = "unavailable"


class StateForked(StateUnavailable):
    """A forked child's state store was in use by another thread of the parent at the
    fork: its connection can neither be used nor replaced there (SQLite keeps its file
    locks per process). Fork while no call uses state, or open the host after the fork."""

    reason = "state store forked while in use"


class TransactionClosed(StateError):
    """The transaction was already committed or rolled back (a host bug, not the plugin's)."""

    reason = "transaction closed"


# -- events (wasmext.observe) ---------------------------------------------------------------

class EventError(WasmextError):
    """An event operation refused; `code` is the ABI error code to answer the guest."""

    reason, code = "event", "invalid"


class InvalidTopic(EventError):
    """Not a dot-separated topic (or pattern) of [A-Za-z0-9_-] segments."""

    reason, code = "invalid topic", "invalid"


class EventDenied(EventError, CapabilityDenied):
    """A topic the emitter or subscriber was not granted."""

    reason, code = "event denied", "denied"


class RateLimited(EventError):
    """The emitter is over its event rate."""

    reason, code = "rate limited", "limit"


class CascadeLimit(EventError):
    """Events emitted while delivering events, nested too deep."""

    reason, code = "event cascade too deep", "limit"


class TooManySubscriptions(EventError):
    """A plugin listed more subscription patterns than the bus takes (each is checked
    against every event anyone emits, under the bus's lock)."""

    reason, code = "too many subscriptions", "limit"


class BusClosed(EventError):
    """The event bus is shut down."""

    reason, code = "bus closed", "unavailable"


# -- services, MCP, cluster -----------------------------------------------------------------

class ModelError(WasmextError):
    """A chat completion failed; `timed_out` when the deadline, not the endpoint, ended it."""

    reason = "model"

    def __init__(self, message: str, *, timed_out: bool = False, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.timed_out = timed_out


class McpToolError(WasmextError, RuntimeError):
    """A tool result the MCP server marked as an error; the message is its text."""

    reason = "mcp tool"


class ContractError(WasmextError):
    """A message that is not the contract: unknown key, wrong type, too big, too deep."""


class ActivationError(WasmextError):
    """An output-extension activation (or user copy) the host refuses."""

    reason = "activation"


class NatsUnavailable(WasmextError):
    """The NATS server cannot be reached."""

    reason = "nats unavailable"


class NatsAuthFailed(NatsUnavailable):
    """The NATS server refused the login: raised as soon as it says so, the secret unsaid."""

    reason = "nats authorization failed"


class NatsLinkForked(NatsUnavailable):
    """A link opened on an event loop (`NatsLink.open`) used in a process forked from it:
    the loop, its selector and the socket are the parent's. Open one in the child."""

    reason = "nats link of the parent process"
