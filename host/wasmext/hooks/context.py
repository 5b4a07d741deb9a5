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
    def add(self, entry: Entry, outcome: str, detail: str | None) -> None: ...

    def note(self, hook: str, outcome: str, detail: str | None = None,
             plugin_id: str | None = None) -> None: ...


class HookHost(Protocol):
    @property
    def plugins(self) -> Mapping[str, LoadedPlugin]: ...

    @property
    def observe(self) -> Observer: ...

    def ordered(self, hook: str) -> list[Entry]:
        """The entries of `hook` in call order."""

    def call(self, entry: Entry, data: Any, session: HookSession | None = None
             ) -> CallResult | None:
        """Call one entry under its plugin's failure policy (None: skipped or failed)."""

    def try_call(self, plugin_id: str, hook: str, data: Any,
                 session: HookSession | None = None
                 ) -> tuple[CallResult | None, str | None]:
        """Call a named plugin without its failure policy."""

    def record_fault(self, lp: LoadedPlugin, hook: str, err: WasmextError) -> None: ...


class HookSession(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def state(self) -> dict[str, Any]: ...

    @property
    def trace(self) -> TraceNotes: ...

    @property
    def host(self) -> HookHost: ...
