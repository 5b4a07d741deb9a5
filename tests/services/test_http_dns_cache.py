"""http.fetch reuses a name's DNS answer for a few seconds, never a verdict on it.

Each request checks the kept addresses against its own plugin's grants and is sent
to the one it checked: a DNS answer that changes to a forbidden address is refused
once the kept answer is older than the TTL, and in the meantime requests still go to
the address that was checked, never to the new one.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator

import pytest
from test_http_fetch import add, healthy, refused

from loopback import Loopback
from wasmext import Host
from wasmext.services.http import guard as netguard
from wasmext.testing import make_host


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def host() -> Iterator[Host]:
    with make_host() as h:
        yield h


@pytest.fixture
def clock(host: Host) -> Clock:
    fake = Clock()
    host.http.addresses.clock = fake
    return fake


class Dns:
    """getaddrinfo's answers for every name, counted, changed by the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
        self.answer: str | None = answer
        self.asked = 0
        monkeypatch.setattr(netguard, "_lookup", self.lookup)

    def lookup(self, name: str, port: int) -> list[netguard.Address]:
        self.asked += 1
        if self.answer is None:
            raise OSError("name or service not known")
        return [ipaddress.ip_address(self.answer)]


def test_a_kept_answer_is_reused_within_its_ttl(host: Host, server: Loopback, clock: Clock,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    dns = Dns(monkeypatch, "127.0.0.1")
    plugin = add(host, "kept", {"url": f"http://kept.example:{server.port}/hello"},
                 {"http:kept.example", "http:127.0.0.1"})
    for _ in range(3):
        assert plugin.call("test").value["body"] == b"hi"
    assert dns.asked == 1
    clock.now += host.http.addresses.ttl_s + 0.001
    assert plugin.call("test").value["body"] == b"hi"
    assert dns.asked == 2


def test_a_dns_change_to_a_forbidden_address_is_refused(host: Host, server: Loopback,
                                                        clock: Clock,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    dns = Dns(monkeypatch, "127.0.0.1")
    plugin = add(host, "rebound", {"url": f"http://rebound.example:{server.port}/hello"},
                 {"http:rebound.example", "http:127.0.0.1"})
    assert plugin.call("test").value["body"] == b"hi"
    dns.answer = "10.1.2.3"  # rebinding to an address no grant names
    clock.now += host.http.addresses.ttl_s / 2
    assert plugin.call("test").value["body"] == b"hi"  # to the checked address, kept
    assert len(server.seen) == 2 and server.server.connections == 1
    clock.now += host.http.addresses.ttl_s
    assert "non-public" in refused(plugin, "denied", 2)
    assert dns.asked == 2 and len(server.seen) == 2  # asked again; nothing went out
    assert "non-public" in refused(plugin, "denied", 2)  # the kept new answer: refused
    assert dns.asked == 2 and len(server.seen) == 2
    monkeypatch.undo()
    healthy(host, server)


def test_a_kept_answer_is_checked_against_each_plugins_grants(
        host: Host, server: Loopback, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    dns = Dns(monkeypatch, "127.0.0.1")
    url = {"url": f"http://shared.example:{server.port}/hello"}
    allowed = add(host, "allowed", url, {"http:shared.example", "http:127.0.0.1"})
    named_only = add(host, "named-only", url, {"http:shared.example"})
    assert allowed.call("test").value["body"] == b"hi"
    assert "non-public" in refused(named_only, "denied", 2)
    assert dns.asked == 1  # the kept answer was used, and judged by this plugin's grants
    assert len(server.seen) == 1
    monkeypatch.undo()
    healthy(host, server)


def test_a_failed_lookup_is_not_kept(host: Host, server: Loopback, clock: Clock,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    dns = Dns(monkeypatch, "127.0.0.1")
    dns.answer = None
    plugin = add(host, "flaky", {"url": f"http://flaky.example:{server.port}/hello"},
                 {"http:flaky.example", "http:127.0.0.1"})
    assert "cannot resolve" in refused(plugin, "unavailable", 2)
    dns.answer = "127.0.0.1"
    assert plugin.call("test").value["body"] == b"hi"
    assert dns.asked == 2


def test_without_a_ttl_every_request_asks_dns(host: Host, server: Loopback,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    host.http.addresses.ttl_s = 0
    dns = Dns(monkeypatch, "127.0.0.1")
    plugin = add(host, "uncached", {"url": f"http://uncached.example:{server.port}/hello"},
                 {"http:uncached.example", "http:127.0.0.1"})
    for _ in range(2):
        assert plugin.call("test").value["body"] == b"hi"
    assert dns.asked == 2


def test_the_kept_names_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    dns = Dns(monkeypatch, "192.0.2.1")
    cache = netguard.AddressCache(60, max_names=2)
    for name in ("1.example", "2.example", "3.example", "3.example", "2.example"):
        assert [str(a) for a in cache.lookup(name, 80, time.monotonic() + 5)] == ["192.0.2.1"]
    assert dns.asked == 3
    cache.lookup("1.example", 80, time.monotonic() + 5)  # the least recently used name was dropped
    assert dns.asked == 4
