"""The host `wasmext call` runs one plugin in: nothing of it outlives the command."""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["throwaway_host"]


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at the time (a test runner swaps it)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


@contextlib.contextmanager
def throwaway_host() -> Iterator[Any]:
    """A Host with an in-memory state store, the in-process event bus, no plugin folders
    and a data folder deleted on exit."""
    from wasmext import Host, HostConfig

    # The one load-time notice a caller must see: a setting that asked for an
    # environment variable it may not read (it reads as unset).
    refusals = logging.getLogger("wasmext.env")
    if not refusals.handlers:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("wasmext: %(message)s"))
        refusals.addHandler(handler)
    with tempfile.TemporaryDirectory(prefix="wasmext-call-") as data:
        config = HostConfig(data_dir=Path(data), state_backend="memory", auto_enable=True)
        with Host(config, plugin_dirs=[]) as host:
            yield host
