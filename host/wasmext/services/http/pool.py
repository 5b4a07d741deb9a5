"""Keep-alive HTTP clients for `http.fetch`, one per checked address.

A client is keyed by the address `http.guard` checked for the request (scheme,
host name, port and the resolved IP the connection goes to), so a connection
kept alive for one request is reused only by a later request that was checked
to the same key: a name that resolves elsewhere next time gets another client
and a new connection, and a connection made (and TLS-verified) for one name is
never handed a request for another name at the same address. Every client
shares one verifying TLS context (`http.transport.tls_context`) and its reads and
writes stay under each request's deadline (`http.transport.bounded_transport`).
At most `max_clients` are kept; the least recently used is closed first.
Clients keep no cookies: a client serves every plugin that fetches from its
address, and a cookie one plugin's server set must not ride on another's request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx2

__all__ = ["ClientPool", "PoolKey", "keepalive_client"]

PoolKey = tuple[str, str, int, str]  # scheme, host name, port, checked address


def keepalive_client(max_connections: int = 8,
                     headers: dict[str, str] | None = None) -> httpx2.Client:
    """A keep-alive client under each request's deadline that stores no cookies and
    follows no redirects; `headers` go with every request it sends."""
    # httpx is imported with the first client, not the host (`http.transport`'s docstring).
    from http.cookiejar import CookieJar, DefaultCookiePolicy  # brings http.client, ssl

    import httpx2

    from wasmext.services.http.transport import bounded_transport

    jar = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
    return httpx2.Client(transport=bounded_transport(max_connections), trust_env=False,
                         follow_redirects=False, cookies=jar, headers=headers)


class ClientPool:
    """Keep-alive clients by checked address, at most `max_clients`, LRU."""

    def __init__(self, max_clients: int = 64, connections_per_client: int = 8) -> None:
        self.max_clients = max_clients
        self.connections_per_client = connections_per_client
        self._clients: OrderedDict[PoolKey, httpx2.Client] = OrderedDict()
        self._lock = threading.Lock()

    def client(self, key: PoolKey, headers: dict[str, str] | None = None) -> httpx2.Client:
        """The client for `key`, made on first use, sending `headers` (fixed by the key:
        its Host header) with every request."""
        with self._lock:
            client = self._clients.get(key)
            if client is not None:
                self._clients.move_to_end(key)
                return client
            client = keepalive_client(self.connections_per_client, headers)
            self._clients[key] = client
            evicted = self._clients.popitem(last=False)[1] \
                if len(self._clients) > self.max_clients else None
        if evicted is not None:
            evicted.close()  # a request still on it fails as `unavailable`, as on a reset
        return client

    def close(self) -> None:
        """Close every client and its idle connections."""
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            client.close()
