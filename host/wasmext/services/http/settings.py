"""What the `[http]` section decides (`HttpSettings`), apart from its schema
(`services.http.config`), so that a host without a config file builds no pydantic model."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from wasmext.services.http.fetch import HttpFetch, HttpLimits

__all__ = ["HttpSettings"]


@dataclass(frozen=True)
class HttpSettings:
    """The [http] section: http.fetch's caps and the setting-to-header injections."""

    limits: HttpLimits = dataclasses.field(default_factory=HttpLimits)
    # (plugin id, host pattern, header, setting, scheme, port)
    inject: tuple[tuple[str, str, str, str, str, int], ...] = ()

    def service(self) -> HttpFetch:
        """An http.fetch service with these caps and injections."""
        fetch = HttpFetch(self.limits)
        for plugin_id, host, header, setting, scheme, port in self.inject:
            fetch.inject_header(plugin_id, host, header, setting, scheme=scheme, port=port)
        return fetch
