"""What a hook runner needs: a small protocol, implemented by `Session`.

The runners never import the Session or the Host; they take a `HookSession`,
whose `host` orders entries and calls plugins under their failure policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from wasmext.errors import WasmextError
from wasmext.hooks.ordering import Entry
from wasmext.sandbox.instance import CallResult
from wasmext.services.events import Observer
from wasmext.services.hostview import LoadedPlugin

__all__ = ["HookHost", "HookSession", "TraceNotes"]


class TraceNotes(Protocol):
    """Where hook calls leave their trace notes."""

    def add(self, entry: Entry, outcome: str, detail: str | None) -> None:
        """Note the outcome of calling one entry."""
        ...

    def note(self, hook: str, outcome: str, detail: str | None = None,
             plugin_id: str | None = None) -> None:
        """Note an event of a hook, optionally naming a plugin."""
        ...


class HookHost(Protocol):
    """What the hook runners need of a host."""

    @property
    def plugins(self) -> Mapping[str, LoadedPlugin]:
        """The loaded plugins by id."""
        ...

    @property
    def observe(self) -> Observer:
        """The host's metrics, logs and events."""
        ...

    def ordered(self, hook: str) -> list[Entry]:
        """The entries of `hook` in call order."""

    def call(self, entry: Entry, data: Any, session: HookSession | None = None
             ) -> CallResult | None:
        """Call one entry under its plugin's failure policy (None: skipped or failed)."""

    def try_call(self, plugin_id: str, hook: str, data: Any,
                 session: HookSession | None = None
                 ) -> tuple[CallResult | None, str | None]:
        """Call a named plugin without its failure policy."""

    def record_fault(self, lp: LoadedPlugin, hook: str, err: WasmextError) -> None:
        """Log the fault and keep it in the host's fault list."""
        ...


class HookSession(Protocol):
    """What the hook runners need of a session."""

    @property
    def id(self) -> str:
        """The session id."""
        ...

    @property
    def state(self) -> dict[str, Any]:
        """The application's state of the session (prompt conditions read it)."""
        ...

    @property
    def trace(self) -> TraceNotes:
        """The session's trace."""
        ...

    @property
    def host(self) -> HookHost:
        """The host the session runs on."""
        ...
