"""The host `wasmext call` runs one plugin in: nothing of it outlives the command."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wasmext_cli.common import show_notices

__all__ = ["throwaway_host"]


@contextlib.contextmanager
def throwaway_host() -> Iterator[Any]:
    """A Host with an in-memory state store, the in-process event bus, no plugin folders
    and a data folder deleted on exit."""
    from wasmext import Host, HostConfig

    # The notices a caller must see: a setting that asked for an environment variable
    # it may not read (it reads as unset), an op denied for want of a grant.
    show_notices(lambda _plugin_id, capability: f"to allow it: --grant {capability}")
    with tempfile.TemporaryDirectory(prefix="wasmext-call-") as data:
        config = HostConfig(data_dir=Path(data), state_backend="memory", auto_enable=True)
        with Host(config, plugin_dirs=[]) as host:
            yield host
