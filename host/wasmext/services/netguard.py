"""Which URLs a plugin may reach: host patterns from grants, addresses checked once.

A grant `http:<pattern>` names hosts (`api.example.com`, `*.example.org`,
fnmatch, case-insensitive). A name is resolved once; the caller connects to
the address returned here, so a second resolution (DNS rebinding) never
decides where the bytes go. An address that is not globally routable
(loopback, private, link-local with the cloud metadata service, unspecified,
multicast, reserved, IPv4-mapped forms of these) is refused unless a grant
names that very address (`http:127.0.0.1`, `http:[::1]`).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Refused", "Target", "host_allowed", "resolve_target"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# getaddrinfo cannot be interrupted; a few threads let a lookup be abandoned at
# the call's deadline while it finishes in the background.
_resolver = ThreadPoolExecutor(max_workers=4, thread_name_prefix="wasmext-dns")


class Refused(Exception):
    """A URL the plugin may not reach; `code` is the ABI error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Target:
    """Where one request goes: the URL's parts and the address that was checked."""

    scheme: str
    host: str       # the name as the URL gives it (lower case, no brackets)
    port: int
    address: str    # the checked IP the connection must use
    path: str       # path and query

    @property
    def host_header(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return shown if self.port == default else f"{shown}:{self.port}"

    @property
    def connect_url(self) -> str:
        addr = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{addr}:{self.port}{self.path}"


def _patterns(grants: Iterable[str]) -> list[str]:
    out = []
    for grant in grants:
        if grant.startswith("http:"):
            pattern = grant[5:].strip().lower()
            if pattern.startswith("[") and pattern.endswith("]"):
                pattern = pattern[1:-1]
            if pattern:
                out.append(pattern)
    return out


def host_allowed(grants: Iterable[str], host: str) -> bool:
    host = host.lower()
    return any(fnmatch.fnmatchcase(host, p) for p in _patterns(grants))


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def forbidden(address: Address) -> bool:
    """Not a public unicast address: loopback, private, link-local, metadata, ..."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not address.is_global or address.is_multicast


def _named_exactly(grants: Iterable[str], address: Address) -> bool:
    for pattern in _patterns(grants):
        literal = _literal(pattern)
        if literal is not None and literal == address:
            return True
    return False


def split_url(url: str) -> tuple[str, str, int, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused("invalid", f"bad URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise Refused("invalid", f"scheme {scheme or '(none)'!r} is not http or https")
    if parts.username is not None or parts.password is not None:
        raise Refused("invalid", "credentials in the URL are not allowed")
    host = (parts.hostname or "").lower()
    if not host:
        raise Refused("invalid", "the URL has no host")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return scheme, host, port or (443 if scheme == "https" else 80), path


def _lookup(host: str, port: int) -> list[Address]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def resolve_target(url: str, grants: frozenset[str], deadline: float) -> Target:
    """Check `url` against the grants and resolve its host once, by `deadline`."""
    scheme, host, port, path = split_url(url)
    if not host_allowed(grants, host):
        raise Refused("denied", f"host {host!r} is not granted (needs http:<pattern>)")
    literal = _literal(host)
    if literal is not None:
        addresses = [literal]
    else:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refused("timeout", "the call's deadline passed before the DNS lookup")
        try:
            addresses = _resolver.submit(_lookup, host, port).result(timeout=left)
        except FutureTimeout:
            raise Refused("timeout", f"resolving {host!r} ran past the call's deadline") from None
        except (OSError, UnicodeError, ValueError) as exc:
            raise Refused("unavailable", f"cannot resolve {host!r}: {exc}") from None
    for address in addresses:
        if not forbidden(address) or _named_exactly(grants, address):
            return Target(scheme, host, port, str(address), path)
    raise Refused("denied", f"host {host!r} resolves to {addresses[0]}, a non-public address "
                  "(only a grant naming that address allows it)")
