"""Which URLs a plugin may reach: host patterns from grants, addresses checked once.

A grant `http:<pattern>` names hosts (`api.example.com`, `*.example.org`,
fnmatch, case-insensitive). A name is resolved once; the caller connects to
the address returned here, so a second resolution (DNS rebinding) never
decides where the bytes go. An address that is not globally routable
(loopback, private, link-local with the cloud metadata service, unspecified,
multicast, reserved) is refused unless a grant names that very address
(`http:127.0.0.1`, `http:[::1]`). An IPv6 address that carries an IPv4 one
(IPv4-mapped, IPv4-translated, IPv4-compatible, NAT64, 6to4) is judged by the
address it carries, because a translator on the path delivers the bytes there.

A name's addresses may be kept for a few seconds (`AddressCache`, one per
http.fetch service) so that a stream of requests to one host does not wait on
getaddrinfo each time. Only the lookup is kept: every request still checks the
kept addresses against its own plugin's grants and connects to the one it
checked, so a kept answer never lets a request reach an address the rules
forbid; a new DNS answer is seen once the kept one is older than its TTL.
"""

from __future__ import annotations

import fnmatch
import functools
import ipaddress
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import urlsplit

import idna

from wasmext.errors import Refused

__all__ = ["AddressCache", "Refused", "Target", "ascii_host", "ascii_pattern", "embedded_ipv4",
           "forbidden", "host_allowed", "resolve_target", "split_url"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# getaddrinfo cannot be interrupted; threads let a lookup be abandoned at the call's
# deadline while it finishes in the background. An abandoned lookup still holds its
# thread (a name whose DNS server stalls can take tens of seconds), so one plugin may
# hold at most MAX_LOOKUPS_PER_OWNER of them: with four shared threads, one plugin
# asking for slow names made every other plugin's lookups wait past their deadlines.
MAX_LOOKUPS = 32
MAX_LOOKUPS_PER_OWNER = 4
# What a request's URL, host and address decide is a pure function of them and the
# plugin's grants: the last few hundred verdicts are kept (per exact grants, host,
# address), so a stream of requests to one URL does not parse and judge it every time.
# Lookups are never kept here (`AddressCache` keeps those, and they are judged anew).
_VERDICTS = 512
# Only short URLs are kept: 512 kept URLs of 8,192 characters (a redirect's even
# longer), with their paths, would hold tens of MiB a plugin chose.
KEPT_URL_CHARS = 1024
_resolver = ThreadPoolExecutor(max_workers=MAX_LOOKUPS, thread_name_prefix="wasmext-dns")
_unanswered: dict[str, int] = {}  # owner -> its lookups submitted and not yet finished
_unanswered_lock = threading.Lock()


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
        """The Host header: the host, with the port unless it is the scheme's default."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return shown if self.port == default else f"{shown}:{self.port}"

    @property
    def connect_url(self) -> str:
        """The URL to connect to: the checked address instead of the host name."""
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
                out.append(ascii_pattern(pattern))
    return out


def ascii_pattern(pattern: str) -> str:
    """A host pattern with each internationalised label in the ASCII spelling that
    `ascii_host` gives names (`*.bücher.example` matches `a.xn--bcher-kva.example`)."""
    if pattern.isascii():
        return pattern
    labels = []
    for label in pattern.split("."):
        try:
            labels.append(label if label.isascii() else
                          idna.encode(label, uts46=True).decode("ascii"))
        except (idna.IDNAError, UnicodeError, ValueError):
            labels.append(label)  # matches no ASCII name: a grant that grants nothing
    return ".".join(labels)


def host_allowed(grants: Iterable[str], host: str) -> bool:
    """Whether a net: grant's pattern matches the host."""
    host = host.lower()
    return any(fnmatch.fnmatchcase(host, p) for p in _patterns(grants))


@functools.lru_cache(maxsize=_VERDICTS)
def _granted(grants: frozenset[str], host: str) -> bool:
    return host_allowed(grants, host)


@functools.lru_cache(maxsize=_VERDICTS)
def _address_allowed(grants: frozenset[str], address: Address) -> bool:
    return not forbidden(address) or _named_exactly(grants, address)


@functools.lru_cache(maxsize=_VERDICTS)
def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


# Each carries an IPv4 address in its last 32 bits: the NAT64 well-known prefix
# (RFC 6052), IPv4-translated (RFC 2765) and the deprecated IPv4-compatible form.
_LOW_32_BITS = tuple(ipaddress.IPv6Network(n) for n in
                     ("64:ff9b::/96", "::ffff:0:0:0/96", "::/96"))
# Local-use NAT64 (RFC 8215): the operator picks the prefix length, so the IPv4
# address may sit at any of the RFC 6052 positions (bit ranges, first bit 0).
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_RFC6052_POSITIONS = (((48, 64), (72, 88)), ((56, 64), (72, 96)), ((72, 104),),
                      ((80, 112),), ((96, 128),))


def _bits(value: int, start: int, end: int) -> int:
    return (value >> (128 - end)) & ((1 << (end - start)) - 1)


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address may deliver to (none for a native one)."""
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address.sixtofour is not None:
        return [address.sixtofour]
    value = int(address)
    if any(address in network for network in _LOW_32_BITS):
        return [ipaddress.IPv4Address(value & 0xFFFF_FFFF)]
    if address in _NAT64_LOCAL:
        out = []
        for position in _RFC6052_POSITIONS:
            v4 = 0
            for start, end in position:
                v4 = (v4 << (end - start)) | _bits(value, start, end)
            out.append(ipaddress.IPv4Address(v4))
        return out
    return []


def forbidden(address: Address) -> bool:
    """Not a public unicast address: loopback, private, link-local, metadata, ...; an
    address that carries IPv4 is forbidden when any IPv4 address it may reach is."""
    if isinstance(address, ipaddress.IPv6Address):
        carried = embedded_ipv4(address)
        if carried:
            return any(forbidden(v4) for v4 in carried)
    return not address.is_global or address.is_multicast


def _named_exactly(grants: Iterable[str], address: Address) -> bool:
    for pattern in _patterns(grants):
        literal = _literal(pattern)
        if literal is not None and literal == address:
            return True
    return False


def ascii_host(host: str) -> str:
    """The name in its one ASCII (IDNA A-label) spelling, which the grants are matched
    against, DNS resolves and the Host header carries; `invalid` when it has none."""
    if host.isascii():
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError) as exc:
        raise Refused("invalid", f"the host is not a valid internationalised name: {exc}"
                      ) from None


def split_url(url: str) -> tuple[str, str, int, str]:
    """Split an http(s) URL into scheme, host, port and path; Refused if it is bad."""
    return _split_kept(url) if len(url) <= KEPT_URL_CHARS else _split(url)


def _split(url: str) -> tuple[str, str, int, str]:
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
    host = ascii_host((parts.hostname or "").lower())
    if not host:
        raise Refused("invalid", "the URL has no host")
    if len(host) > 253:  # longer than any DNS name: it could only fill the verdict caches
        raise Refused("invalid", f"the host is {len(host)} characters long (at most 253)")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return scheme, host, port or (443 if scheme == "https" else 80), path


_split_kept = functools.lru_cache(maxsize=_VERDICTS)(_split)  # a refusal is raised: not kept


def _lookup(host: str, port: int) -> list[Address]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def _finished(owner: str) -> Callable[[object], None]:
    def done(_future: object) -> None:
        with _unanswered_lock:
            held = _unanswered.pop(owner, 1) - 1
            if held:
                _unanswered[owner] = held
    return done


def _resolve(host: str, port: int, deadline: float, owner: str = "") -> list[Address]:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Refused("timeout", "the call's deadline passed before the DNS lookup")
    with _unanswered_lock:
        held = _unanswered.get(owner, 0)
        if held >= MAX_LOOKUPS_PER_OWNER:
            raise Refused("limit", f"{held} DNS lookups of this plugin are still unanswered "
                          f"(at most {MAX_LOOKUPS_PER_OWNER})")
        _unanswered[owner] = held + 1
    future = _resolver.submit(_lookup, host, port)
    future.add_done_callback(_finished(owner))  # run on cancel too
    try:
        return future.result(timeout=left)
    except FutureTimeout:
        future.cancel()  # still queued: never run for a caller that left
        raise Refused("timeout", f"resolving {host!r} ran past the call's deadline") from None
    except (OSError, UnicodeError, ValueError) as exc:
        raise Refused("unavailable", f"cannot resolve {host!r}: {exc}") from None


class AddressCache:
    """Successful lookups of (name, port) kept for `ttl_s` seconds, at most `max_names`.

    It keeps what DNS answered, never a verdict: `resolve_target` checks the kept
    addresses against each request's grants as it would a fresh answer. Failures are
    not kept (a name that did not resolve is asked again next time)."""

    def __init__(self, ttl_s: float, max_names: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_names = max_names
        self.clock = clock
        self._kept: OrderedDict[tuple[str, int], tuple[float, list[Address]]] = OrderedDict()
        self._lock = threading.Lock()

    def lookup(self, host: str, port: int, deadline: float, owner: str = "") -> list[Address]:
        """The name's addresses: kept ones younger than the TTL, else a lookup by `deadline`
        (counted against `owner`'s unanswered lookups)."""
        if self.ttl_s <= 0:
            return _resolve(host, port, deadline, owner)
        name = (host, port)
        with self._lock:
            kept = self._kept.get(name)
            if kept is not None and self.clock() < kept[0]:
                return kept[1]
        addresses = _resolve(host, port, deadline, owner)
        with self._lock:
            self._kept[name] = (self.clock() + self.ttl_s, addresses)
            self._kept.move_to_end(name)
            while len(self._kept) > self.max_names:
                self._kept.popitem(last=False)
        return addresses

    def forget(self) -> None:
        """Drop every kept answer."""
        with self._lock:
            self._kept.clear()


def resolve_target(url: str, grants: frozenset[str], deadline: float,
                   cache: AddressCache | None = None, owner: str = "") -> Target:
    """Check `url` against the grants and resolve its host once, by `deadline` (through
    `cache` when given: its addresses are checked here like a fresh answer); `owner`
    (the plugin) may have at most MAX_LOOKUPS_PER_OWNER lookups unanswered."""
    if type(grants) is not frozenset:  # the verdicts are kept by the exact grants
        grants = frozenset(grants)
    scheme, host, port, path = split_url(url)
    if not _granted(grants, host):
        raise Refused("denied", f"host {host!r} is not granted (needs http:<pattern>)")
    literal = _literal(host)
    if literal is not None:
        addresses = [literal]
    elif cache is not None:
        addresses = cache.lookup(host, port, deadline, owner)
    else:
        addresses = _resolve(host, port, deadline, owner)
    for address in addresses:
        if _address_allowed(grants, address):
            return Target(scheme, host, port, str(address), path)
    raise Refused("denied", f"host {host!r} resolves to {addresses[0]}, a non-public address "
                  "(only a grant naming that address allows it)")
