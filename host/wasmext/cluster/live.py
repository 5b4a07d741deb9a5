"""A routing policy and an extension registry read again when their files change.

    live = LiveRouting(Path("policy.toml"), Path("wasmext.toml"),
                       lambda p: load_config(p).extensions, link)
    router = live.current()      # before each run: the files as they are now

`current()` looks at the files' size and modification time (one `stat` each) and,
when either changed, reads them again and builds a new `Router`. A file that no
longer reads or validates is logged once, and the previous router stays in use: a
half-saved edit never takes the pipeline down. A changed registry gets a new
`RemoteCaller` on the same link; an extension whose entry did not change keeps its
breaker and its stats. The first read's error is raised, as for any config.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from wasmext._toml import ConfigTextError, parse_text, read_capped
from wasmext.cluster.registry import RemoteExtension
from wasmext.cluster.routing import Router, Routing, parse_routing
from wasmext.errors import ConfigError

if TYPE_CHECKING:
    from wasmext.cluster.link import NatsLink

__all__ = ["LiveRouting", "load_routing"]

log = logging.getLogger("wasmext.cluster.live")
RegistryReader = Callable[[Path], Mapping[str, RemoteExtension]]


def load_routing(path: Path) -> Routing:
    """A policy file (.json or .toml), tenants and all, or a ConfigError naming why not."""
    try:
        raw = parse_text(read_capped(path), kind="json" if path.suffix == ".json" else "toml")
    except (OSError, ConfigTextError) as exc:
        raise ConfigError(f"{path}: cannot read policy: {exc}") from exc
    try:
        return parse_routing(raw)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err.message}", problems=err.problems) from None


def _stamp(path: Path | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return (-1, -1)
    return (st.st_size, st.st_mtime_ns)


class LiveRouting:
    """The current Router for a policy file and a registry file, reloaded on change."""

    def __init__(self, policy_path: Path, registry_path: Path | None = None,
                 read_registry: RegistryReader | None = None,
                 link: NatsLink | None = None, *, trusted_workers: tuple[str, ...] = ()
                 ) -> None:
        """`trusted_workers`: as for RemoteCaller (only answers they signed count)."""
        self.policy_path, self.registry_path = policy_path, registry_path
        self.link = link
        self.trusted_workers = trusted_workers
        self.reloads = 0  # routers built after the first
        self._read_registry = read_registry
        self._seen = (_stamp(policy_path), _stamp(registry_path))
        self._router = self._build(None)

    def _build(self, old: Router | None) -> Router:
        routing = load_routing(self.policy_path)
        registry: Mapping[str, RemoteExtension] = {}
        if self.registry_path is not None and self._read_registry is not None:
            registry = self._read_registry(self.registry_path)
        used = sorted(routing.stage_ids())
        remote = [ext_id for ext_id in used if ext_id in registry]
        if remote and self.link is None:
            raise ConfigError(f"{self.policy_path}: stage {remote[0]} is a remote extension "
                              f"([extensions.{remote[0]}]): it needs a NATS connection "
                              "(wasmext run --nats URL, or [nats] url)")
        if self.link is None:
            return Router(routing)
        # Only with a NATS link: msgspec and nats-py are the `nats` extra's.
        from wasmext.cluster.remote import RemoteCaller

        caller = RemoteCaller(registry, self.link, trusted_workers=self.trusted_workers)
        previous = old.caller if old is not None else None
        if previous is not None:  # an unchanged entry keeps what it has seen
            for ext_id, ext in registry.items():
                if previous.registry.get(ext_id) == ext:
                    caller.breakers[ext_id] = previous.breakers[ext_id]
                    caller.stats[ext_id] = previous.stats[ext_id]
        return Router(routing, caller)

    def current(self) -> Router:
        """The Router for the files as they are now (the previous one if they are broken)."""
        seen = (_stamp(self.policy_path), _stamp(self.registry_path))
        if seen != self._seen:
            self._seen = seen  # a broken file is reported once, not at every run
            try:
                self._router = self._build(self._router)
                self.reloads += 1
                log.info("routing reloaded from %s", self.policy_path)
            except ConfigError as err:
                log.warning("routing not reloaded, the previous one stays: %s",
                            err.describe())
        return self._router
