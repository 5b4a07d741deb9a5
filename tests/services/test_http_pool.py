"""Kept-alive connections for http.fetch and llm.complete, against real loopback servers.

A connection is reused only for a request checked to the same address (scheme,
name, port, resolved IP): a name that resolves elsewhere the next time goes to
the new address or is refused, never over the old connection. A kept-alive
connection is cut off at the deadline of the request using it, and carries no
cookie from one request to the next.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from test_http_fetch import add, cut_at_deadline, healthy, refused
from test_llm_complete import ASK, completions, endpoint_host, llm_wasm

from loopback import Loopback, loopback
from wasmext import Host
from wasmext.services.http import guard as netguard
from wasmext.testing import make_host


@pytest.fixture
def host() -> Iterator[Host]:
    with make_host() as h:
        yield h


def test_a_keep_alive_connection_is_reused(host: Host, server: Loopback) -> None:
    first = add(host, "first", {"url": server.url("/hello")}, {"http:127.0.0.1"})
    second = add(host, "second", {"url": server.url("/hello")}, {"http:127.0.0.1"})
    for plugin in (first, second, first, second):
        answer = plugin.call("test").value
        assert answer["status"] == 200 and answer["body"] == b"hi"
    assert len(server.seen) == 4
    assert server.server.connections == 1


def test_a_pooled_connection_keeps_its_address_pin(host: Host, server: Loopback,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The same name resolves to 127.0.0.1, then 127.0.0.2 (another server on the same
    # port), then an address no grant names: each request goes where it was checked.
    host.http.addresses.ttl_s = 0  # every request asks DNS: each answer below is new
    with loopback("127.0.0.2", server.port) as other:
        answers = iter(["127.0.0.1", "127.0.0.2", "127.0.0.1", "10.1.2.3"])
        monkeypatch.setattr(netguard, "_lookup",
                            lambda name, port: [netguard.ipaddress.ip_address(next(answers))])
        plugin = add(host, "pinned", {"url": f"http://pinned.example:{server.port}/hello"},
                     {"http:pinned.example", "http:127.0.0.1", "http:127.0.0.2"})
        for expected in (server, other, server):
            before = len(expected.seen)
            assert plugin.call("test").value["body"] == b"hi"
            assert len(expected.seen) == before + 1
            assert expected.seen[-1]["headers"]["host"] == f"pinned.example:{server.port}"
        assert (len(server.seen), len(other.seen)) == (2, 1)
        assert server.server.connections == 1  # the third request reused the first's
        assert "non-public" in refused(plugin, "denied", 2)
        assert (len(server.seen), len(other.seen)) == (2, 1)  # nothing went out
    monkeypatch.undo()
    healthy(host, server)


def test_a_drip_on_a_kept_alive_connection_ends_at_the_deadline(host: Host,
                                                                server: Loopback) -> None:
    warm = add(host, "warm", {"url": server.url("/hello")}, {"http:127.0.0.1"})
    assert warm.call("test").value["status"] == 200
    dripped = add(host, "dripped", {"url": server.url("/drip")}, {"http:127.0.0.1"},
                  limits={"timeout_ms": 1000, "host_call_timeout_ms": 1000})
    cut_at_deadline(dripped, 3)
    assert server.server.connections == 1  # the drip came over the kept-alive connection
    assert server.server.sent_bytes < 60
    healthy(host, server)
    assert server.server.connections == 2  # the cut connection was not reused


def test_no_cookie_rides_on_a_kept_alive_client(host: Host, server: Loopback) -> None:
    setter = add(host, "setter", {"url": server.url("/hello")}, {"http:127.0.0.1"})
    assert "set-cookie" not in setter.call("test").value["headers"]
    assert server.seen[-1]["path"] == "/hello"  # its answer set session=1
    reader = add(host, "reader", {"url": server.url("/echo")}, {"http:127.0.0.1"})
    sent = json.loads(reader.call("test").value["body"])
    assert "cookie" not in {name.lower() for name in sent}
    assert server.server.connections == 1


def test_llm_complete_keeps_its_connection_alive(server: Loopback) -> None:
    with endpoint_host(server) as host:
        plugin = host.add(llm_wasm(ASK), plugin_id="asker", grants={"llm"},
                          limits={"timeout_ms": 5000})
        for _ in range(3):
            assert plugin.call("test").value["text"] == "hello from the model"
        assert len(completions(server)) == 3
        assert server.server.connections == 1


def test_an_llm_drip_on_a_kept_alive_connection_ends_at_the_deadline(
        server: Loopback) -> None:
    with endpoint_host(server) as host:
        plugin = host.add(llm_wasm(ASK), plugin_id="asker", grants={"llm"},
                          limits={"timeout_ms": 1000, "host_call_timeout_ms": 1000})
        assert plugin.call("test").value["text"] == "hello from the model"
        server.server.completion.update(drip_s=0.05)
        cut_at_deadline(plugin, 3)
        assert server.server.connections == 1
        assert server.server.sent_bytes < 60
        server.server.completion.update(drip_s=0.0)
        assert plugin.call("test").value["text"] == "hello from the model"


def test_each_name_on_one_address_sends_its_own_host_header(
        host: Host, server: Loopback, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two names at one address: each kept-alive client sends its own name as Host (the
    # client's fixed header, from the key it was checked to), whatever the guest sends.
    monkeypatch.setattr(netguard, "_lookup",
                        lambda name, port: [netguard.ipaddress.ip_address("127.0.0.1")])
    guest_headers = {"Host": "evil.example", "Accept-Encoding": "gzip", "X-Mine": "yes"}
    plugins = {name: add(host, name.split(".")[0],
                         {"url": f"http://{name}:{server.port}/hello", "headers": guest_headers},
                         {f"http:{name}", "http:127.0.0.1"})
               for name in ("alpha.example", "beta.example")}
    for name in ("alpha.example", "beta.example", "alpha.example", "beta.example"):
        assert plugins[name].call("test").value["body"] == b"hi"
        sent = server.seen[-1]["headers"]
        assert sent["host"] == f"{name}:{server.port}"
        assert sent["accept-encoding"] == "identity"
        assert sent["x-mine"] == "yes"
    assert server.server.connections == 2  # one kept-alive connection per name
    monkeypatch.undo()
    healthy(host, server)
