"""What the services need of the host: a loaded plugin, and a small protocol.

Services (tools, events) call plugins back, so they need a view of the host;
the Host implements `PluginHost`, and nothing here imports it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from wasmext.errors import WasmextError
from wasmext.manifest import Manifest
from wasmext.sandbox.backends.extism import ExtismPlugin
from wasmext.sandbox.faults import detached
from wasmext.sandbox.instance import CallResult
from wasmext.sandbox.plugin import Plugin

__all__ = ["CallFailure", "CallTrace", "FaultRecord", "LoadedPlugin", "PluginHost"]


@dataclass
class LoadedPlugin:
    """A plugin the host loaded, with where it came from and its failure state."""

    plugin: Plugin | ExtismPlugin
    source: str
    load_index: int
    manifest: Manifest | None
    failure: str = "open"
    reload_after: float = 0.0
    backoff_s: float = 0.5
    # The digests, at load, of the files its manifest makes the host run (what its
    # grants were checked against): a rescan reloads it when one of them changes.
    executed: Mapping[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The plugin id."""
        return self.plugin.id


@dataclass(frozen=True)
class FaultRecord:
    """A plugin fault the host recorded: where, why and its failure policy."""

    plugin_id: str
    hook: str
    reason: str
    message: str
    policy: str
    time: float = field(default_factory=time.time)


class CallTrace(Protocol):
    """The part of a session a call is traced into."""

    @property
    def id(self) -> str:
        """The session id."""
        ...

    @property
    def trace(self) -> Any:
        """The session's trace."""
        ...


class CallFailure(str):
    """`try_call`'s reason for a failed call ("code: message"), holding the error behind
    it, so what a guest error carries beyond its code (suggestion, help_url) goes on."""

    error: WasmextError | None = None

    @classmethod
    def of(cls, reason: str, error: WasmextError | None) -> CallFailure:
        """The reason `reason`, caused by `error`."""
        failure = cls(reason)
        failure.error = error
        # A reason is a value, kept as long as whoever asked likes: its error keeps no
        # traceback (the instance of the plugin that called the failed one, and in the
        # frame that holds this reason, a cycle only a collection undoes).
        if error is not None:
            detached(error)
        return failure


class PluginHost(Protocol):
    """The host as a service sees it: its plugins, and calls into them."""

    @property
    def plugins(self) -> Mapping[str, LoadedPlugin]:
        """The loaded plugins by id."""
        ...

    @property
    def load_errors(self) -> list[WasmextError]:
        """The errors of plugins that failed to load."""
        ...

    def try_call(self, plugin_id: str, hook: str, data: Any, session: Any = None
                 ) -> tuple[CallResult | None, str | None]:
        """Call without the failure policy: (result, None) or (None, reason)."""

    def deliver(self, plugin_id: str, hook: str, data: Any) -> CallResult | None:
        """Call under the plugin's failure policy, with no session (event delivery)."""
