"""http.fetch against real loopback servers, and the attacks it must refuse.

Each attack asserts the named error code, a time bound, and that a healthy
plugin (and the attacked one) still answers afterwards.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from hypothesis import given, settings
from hypothesis import strategies as st

from loopback import Loopback, ipv6_loopback_available, loopback
from wasmext import ConfigError, Host, PluginError, Runtime, load_config
from wasmext.errors import Timeout
from wasmext.sandbox.plugin import Plugin
from wasmext.services.http.config import parse_http
from wasmext.services.http.guard import (
    Refused,
    ascii_host,
    forbidden,
    host_allowed,
    resolve_target,
    split_url,
)
from wasmext.testing import DATA_AT, guest_wat, make_host

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'
SECRET = "Bearer s3cr3t-token-4711"


def fetch_wasm(request: dict[str, Any]) -> bytes:
    """A minor-1 guest that sends `request` and answers with the host's answer."""
    raw = msgpack.packb({"op": "http.fetch", **request})
    body = f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))"
    wat = guest_wat(body, imports=HOST_CALL, data=raw,
                    registration={"hooks": [{"hook": "test"}], "abi_minor": 1},
                    memory_pages=4)
    return bytes(wasmtime.wat2wasm(wat))


@pytest.fixture
def host() -> Iterator[Host]:
    with make_host() as h:
        yield h


def add(host: Host, pid: str, request: dict[str, Any], grants: set[str],
        **options: Any) -> Any:
    # Generous default time (a loaded CI machine); the deadline test sets its own.
    options.setdefault("limits", {"timeout_ms": 5000, "host_call_timeout_ms": 5000})
    return host.add(fetch_wasm(request), plugin_id=pid, grants={"http", *grants}, **options)


def refused(plugin: Any, code: str, within_s: float) -> str:
    started = time.monotonic()
    with pytest.raises(PluginError) as info:
        plugin.call("test")
    assert time.monotonic() - started < within_s
    assert info.value.code == code, info.value.message
    return info.value.message


def cut_at_deadline(plugin: Any, within_s: float, hook: str = "test") -> str:
    """The call ends within `within_s` with a named time-out: the op's `timeout` answer,
    or, when a loaded machine delivered that answer past the 20 ms margin it keeps,
    the sandbox's own `Timeout` for the same deadline (a host call that was never
    cut off would instead run for as long as the server drips)."""
    started = time.monotonic()
    with pytest.raises((PluginError, Timeout)) as info:
        plugin.call(hook)
    assert time.monotonic() - started < within_s
    if isinstance(info.value, PluginError):
        assert info.value.code == "timeout", info.value.message
    return info.value.message


def healthy(host: Host, server: Loopback) -> None:
    """A well-behaved plugin still fetches through the same host."""
    pid = "healthy"
    if pid not in host.plugins:
        add(host, pid, {"url": server.url("/hello")}, {"http:127.0.0.1"})
    answer = host.plugins[pid].plugin.call("test").value
    assert answer["status"] == 200 and answer["body"] == b"hi"


def test_fetch_from_a_granted_address(host: Host, server: Loopback) -> None:
    plugin = add(host, "get", {"url": server.url("/hello?x=1"), "headers": {"X-Mine": "1"}},
                 {"http:127.0.0.1"})
    answer = plugin.call("test").value
    assert answer["status"] == 200 and answer["body"] == b"hi"
    assert answer["headers"]["x-answer"] == "yes"
    assert "set-cookie" not in answer["headers"]
    assert answer["url"] == server.url("/hello?x=1")
    assert server.seen[-1]["headers"]["x-mine"] == "1"
    assert server.seen[-1]["headers"]["host"] == f"127.0.0.1:{server.port}"


def test_post_sends_the_body(host: Host, server: Loopback) -> None:
    plugin = add(host, "post", {"url": server.url("/hello"), "method": "POST", "body": "data"},
                 {"http:127.0.0.1"})
    assert plugin.call("test").value["status"] == 200
    assert server.seen[-1]["body"] == b"data"


def test_a_minor_0_guest_cannot_fetch(host: Host, server: Loopback) -> None:
    raw = msgpack.packb({"op": "http.fetch", "url": server.url("/hello")})
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(raw)}))",
                    imports=HOST_CALL, data=raw)
    plugin = host.add(bytes(wasmtime.wat2wasm(wat)), plugin_id="old",
                      grants={"http", "http:127.0.0.1"})
    refused(plugin, "unsupported", 2)
    assert server.seen == []


@pytest.mark.parametrize(("url_host", "grant"), [
    ("127.0.0.1", "http:*"),               # loopback under a wildcard
    ("127.0.0.1", "http:127.0.0.*"),       # a pattern is not the address itself
    ("localhost", "http:localhost"),       # a name that resolves to loopback
    ("169.254.169.254", "http:169.254.*"),  # the cloud metadata service
    ("10.1.2.3", "http:10.*"),             # a private address
    ("192.168.0.1", "http:*"),
    ("0.0.0.0", "http:*"),
    ("[::ffff:127.0.0.1]", "http:*"),      # loopback dressed as IPv6
    ("[fd00:ec2::254]", "http:*"),         # the IPv6 metadata address
    ("[::1]", "http:*"),                   # IPv6 loopback
])
def test_non_public_addresses_need_a_grant_naming_them(host: Host, server: Loopback,
                                                       url_host: str, grant: str) -> None:
    url = f"http://{url_host}:{server.port}/hello"
    plugin = add(host, "attacker", {"url": url}, {grant})
    message = refused(plugin, "denied", 2)
    assert "non-public" in message
    assert server.seen == []
    refused(plugin, "denied", 2)  # the attacker itself still runs
    healthy(host, server)


def test_a_host_outside_the_grants_is_denied(host: Host, server: Loopback) -> None:
    plugin = add(host, "wanderer", {"url": "http://example.org/"}, {"http:api.example.com"})
    assert "not granted" in refused(plugin, "denied", 2)
    healthy(host, server)


@pytest.mark.skipif(not ipv6_loopback_available(), reason="this machine has no IPv6 loopback")
def test_ipv6_loopback_with_a_grant_naming_it() -> None:
    with loopback("::1") as server6, make_host() as host:
        plugin = add(host, "six", {"url": server6.url("/hello")}, {"http:[::1]"})
        assert plugin.call("test").value["body"] == b"hi"
        other = add(host, "six-star", {"url": server6.url("/hello")}, {"http:*"})
        refused(other, "denied", 2)


def test_redirects_stay_inside_the_grants(host: Host, server: Loopback) -> None:
    inside = add(host, "inside", {"url": server.url(f"/redirect?to={server.url('/hello')}")},
                 {"http:127.0.0.1"})
    answer = inside.call("test").value
    assert answer["body"] == b"hi" and answer["url"] == server.url("/hello")
    for n, target in enumerate(("http://169.254.169.254/latest/meta-data/",
                                "http://example.org/")):
        before = len(server.seen)
        escape = add(host, f"escape-{n}", {"url": server.url(f"/redirect?to={target}")},
                     {"http:127.0.0.1"})
        refused(escape, "denied", 2)
        assert len(server.seen) == before + 1  # only the redirecting request went out
    healthy(host, server)


def test_redirect_loops_end_at_the_hop_limit(host: Host, server: Loopback) -> None:
    url = server.url("/hello")
    for _ in range(7):
        url = server.url(f"/redirect?to={url.replace('&', '%26').replace('?', '%3F')}")
    plugin = add(host, "loop", {"url": url}, {"http:127.0.0.1"})
    assert "redirects" in refused(plugin, "limit", 3)
    healthy(host, server)


@pytest.mark.parametrize("path", ["/gigabyte", "/gigabyte-undeclared"])
def test_a_gigabyte_response_stops_at_the_cap(host: Host, server: Loopback, path: str) -> None:
    plugin = add(host, "hungry", {"url": server.url(path)}, {"http:127.0.0.1"},
                 limits={"timeout_ms": 5000, "host_call_timeout_ms": 5000})
    refused(plugin, "limit", 5)
    # The host read at most the cap plus socket buffers, never the gigabyte.
    assert server.server.sent_bytes < 64 << 20
    healthy(host, server)


def test_a_slow_response_ends_at_the_call_deadline(host: Host, server: Loopback) -> None:
    plugin = add(host, "patient", {"url": server.url("/slow")}, {"http:127.0.0.1"},
                 limits={"timeout_ms": 300})
    message = cut_at_deadline(plugin, 1.5)
    assert "deadline" in message or "ran past 300 ms" in message
    healthy(host, server)


@pytest.mark.parametrize("path", ["/drip", "/drip-headers"])
def test_a_server_dripping_bytes_ends_at_the_call_deadline(host: Host, server: Loopback,
                                                           path: str) -> None:
    # One byte every 50 ms: a 400-byte body (or header block) would take 20 s, and no
    # single read ever waits long enough for a per-read timeout.
    plugin = add(host, "dripped", {"url": server.url(path)}, {"http:127.0.0.1"},
                 limits={"timeout_ms": 1000, "host_call_timeout_ms": 1000})
    started = time.monotonic()
    cut_at_deadline(plugin, 3)
    assert time.monotonic() - started >= 0.5  # the drip was read until the deadline
    assert server.server.sent_bytes < 60  # ~20 bytes in a second, never the whole answer
    cut_at_deadline(plugin, 3)
    healthy(host, server)


@contextlib.contextmanager
def dripping_tls_server() -> Iterator[tuple[int, list[int]]]:
    """A TCP server that answers a TLS hello with a record header announcing 16 KiB,
    then drips the record a byte every 50 ms: the handshake's every read is short."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop, sent = threading.Event(), [0]

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.recv(65536)  # the client's hello
                    conn.sendall(b"\x16\x03\x03\x40\x00")
                    while not stop.wait(0.05):
                        conn.sendall(b"\x00")
                        sent[0] += 1
                except OSError:
                    pass  # the client hung up: what the test wants

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], sent
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_dripping_tls_handshake_ends_at_the_call_deadline(host: Host,
                                                            server: Loopback) -> None:
    with dripping_tls_server() as (port, sent):
        plugin = add(host, "handshake", {"url": f"https://127.0.0.1:{port}/"},
                     {"http:127.0.0.1"},
                     limits={"timeout_ms": 1000, "host_call_timeout_ms": 1000})
        started = time.monotonic()
        cut_at_deadline(plugin, 3)
        assert time.monotonic() - started >= 0.5
        assert sent[0] < 60
    healthy(host, server)


def test_an_injected_secret_never_reaches_the_guest(host: Host, server: Loopback) -> None:
    wasm = fetch_wasm({"url": server.url("/echo"), "headers": {"Authorization": "mine"}})
    plugin = Plugin(host.runtime.compile(wasm, "echo"), plugin_id="echo",
                    settings={"token": SECRET}, sensitive=frozenset({"token"}),
                    grants=frozenset({"http", "http:127.0.0.1"}), services=host.runtime.services)
    host.add(plugin)
    host.http.inject_header("echo", "127.0.0.1", "Authorization", "token", scheme="http",
                            port=server.port)
    answer = plugin.call("test").value
    assert server.seen[-1]["headers"]["authorization"] == SECRET  # the server got it ...
    assert SECRET.encode() not in answer["body"]                  # ... the guest did not
    assert b"[redacted]" in answer["body"]
    assert answer["headers"]["x-echo-auth"] == "[redacted]"
    instance = plugin._idle[0]
    memory = instance.memory.read(0, instance.memory.size())
    assert memory is not None and SECRET.encode() not in memory
    healthy(host, server)


def test_invalid_requests(host: Host, server: Loopback) -> None:
    cases: list[dict[str, Any]] = [
        {"url": 5}, {"url": "ftp://127.0.0.1/"}, {"url": "http://u:p@127.0.0.1/"},
        {"url": server.url("/"), "method": "BREW"},
        {"url": server.url("/"), "headers": {"X": "a\r\nInjected: 1"}},
        {"url": server.url("/"), "body": 5},
    ]
    for n, request in enumerate(cases):
        refused(add(host, f"bad-{n}", request, {"http:127.0.0.1"}), "invalid", 2)
    big = add(host, "big-body", {"url": server.url("/"), "method": "POST",
                                 "body": b"x" * 65_537}, {"http:127.0.0.1"})
    refused(big, "limit", 2)
    assert server.seen == []
    healthy(host, server)


def test_a_refused_connection_is_unavailable(host: Host) -> None:
    with loopback() as gone:
        url = gone.url("/hello")
    plugin = add(host, "closed", {"url": url}, {"http:127.0.0.1"})
    refused(plugin, "unavailable", 2)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_url_parsing_never_raises_anything_else(url: str) -> None:
    try:
        scheme, host, port, path = split_url(url)
    except Refused as exc:
        code = exc.code
    else:
        code = "ok"
        assert scheme in ("http", "https") and host and 0 <= port < 65536
        assert path.startswith("/")
    assert code in ("ok", "invalid")


@given(st.ip_addresses())
def test_only_global_unicast_addresses_are_public(address: Any) -> None:
    if not forbidden(address):
        assert address.is_global and not address.is_loopback and not address.is_private


def test_the_http_section_of_the_config(tmp_path: Path, server: Loopback) -> None:
    path = tmp_path / "wasmext.toml"
    path.write_text(f"""
[http]
max_response_bytes = 1
[[http.inject]]
plugin = "echo"
host = "127.0.0.*"
header = "Authorization"
setting = "token"
scheme = "http"
port = {server.port}
""")
    config = load_config(path)
    assert config.http.limits.max_response_bytes == 1
    with Host(config, runtime=Runtime(cache=False), plugin_dirs=[]) as host:
        wasm = fetch_wasm({"url": server.url("/echo")})
        plugin = Plugin(host.runtime.compile(wasm, "echo"), plugin_id="echo",
                        settings={"token": SECRET}, sensitive=frozenset({"token"}),
                        grants=frozenset({"http", "http:127.0.0.1"}),
                        services=host.runtime.services)
        host.add(plugin)
        refused(plugin, "limit", 2)  # the 1-byte cap of the config
        assert server.seen[-1]["headers"]["authorization"] == SECRET
    path.write_text("[[http.inject]]\nplugin = 'x'\n")
    with pytest.raises(ConfigError, match=r"http\.inject\[0\]"):
        load_config(path)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["max_redirects", "inject", "zzz"]),
                       st.one_of(st.integers(-2, 5), st.text(max_size=3),
                                 st.lists(st.dictionaries(st.sampled_from(
                                     ["plugin", "host", "header", "setting"]),
                                     st.text(max_size=3)), max_size=2)), max_size=3))
def test_any_http_section_parses_or_is_a_config_error(raw: dict[str, Any]) -> None:
    with contextlib.suppress(ConfigError):
        parse_http(raw, None)


# -- addresses that carry an IPv4 address, names and values that are not ASCII --------

@pytest.mark.parametrize("url_host", [
    "[64:ff9b::7f00:1]",              # NAT64 (RFC 6052) of 127.0.0.1
    "[64:ff9b::127.0.0.1]",           # the same, dotted
    "[64:ff9b::a9fe:a9fe]",           # NAT64 of the metadata service 169.254.169.254
    "[64:ff9b:1:7f00:0:100::]",       # local-use NAT64 /48 (RFC 8215) of 127.0.0.1
    "[64:ff9b:1::a00:1]",             # local-use NAT64 /96 of 10.0.0.1
    "[2002:7f00:1::1]",               # 6to4 of 127.0.0.1
    "[2002:a9fe:a9fe::]",             # 6to4 of 169.254.169.254
    "[::127.0.0.1]",                  # IPv4-compatible
    "[::ffff:0:127.0.0.1]",           # IPv4-translated
    "[::ffff:0:a00:1]",               # IPv4-translated 10.0.0.1, in hex
    "[0:0:0:0:0:FFFF:7F00:0001]",     # IPv4-mapped, exploded and upper case
])
def test_an_address_carrying_a_non_public_ipv4_is_refused(host: Host, server: Loopback,
                                                          url_host: str) -> None:
    plugin = add(host, "carrier", {"url": f"http://{url_host}:{server.port}/hello"},
                 {"http:*"})
    assert "non-public" in refused(plugin, "denied", 2)
    assert server.seen == []
    healthy(host, server)


def _spellings(address: ipaddress.IPv6Address) -> list[str]:
    exploded = address.exploded
    dotted = ":".join(exploded.split(":")[:6]) + ":" + str(
        ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF))
    return [address.compressed, exploded, exploded.upper(), dotted,
            dotted.replace("0000:", "0:")]


_CARRIERS = {
    "mapped": lambda v4, rest: (0xFFFF << 32) | v4,
    "translated": lambda v4, rest: (0xFFFF << 48) | v4,
    "compatible": lambda v4, rest: v4,
    "nat64": lambda v4, rest: (0x64FF9B << 96) | v4,
    "6to4": lambda v4, rest: (0x2002 << 112) | (v4 << 80) | (rest & ((1 << 80) - 1)),
    "nat64-local-48": lambda v4, rest: (0x64FF9B0001 << 80) | ((v4 >> 16) << 64)
    | ((v4 & 0xFFFF) << 40),
    "nat64-local-64": lambda v4, rest: (0x64FF9B0001 << 80) | (v4 << 24),
}


@settings(max_examples=300, deadline=None)
@given(st.ip_addresses(v=4), st.sampled_from(sorted(_CARRIERS)), st.integers(0, 2**80 - 1),
       st.integers(0, 4))
def test_an_address_carrying_ipv4_is_judged_by_it(v4: ipaddress.IPv4Address, carrier: str,
                                                  rest: int, spelling: int) -> None:
    address = ipaddress.IPv6Address(_CARRIERS[carrier](int(v4), rest))
    url = f"http://[{_spellings(address)[spelling]}]:8080/"
    private = not v4.is_global or v4.is_multicast
    try:
        target = resolve_target(url, frozenset({"http", "http:*"}), time.monotonic() + 5)
    except Refused as exc:
        outcome = exc.code
    else:
        assert ipaddress.ip_address(target.address) == address
        outcome = "allowed"
    assert outcome in ("denied", "allowed")
    if private:
        assert outcome == "denied"
    elif not carrier.startswith("nat64-local"):
        # A public address, carried where only one IPv4 position exists, is reachable.
        assert outcome == "allowed"


@pytest.mark.parametrize("value", ["caf\u00e9", "\u2603", "a\x01b", "tab\tok\x7f", "x" * 8193])
def test_a_header_value_that_is_not_printable_ascii_is_invalid(host: Host, server: Loopback,
                                                                value: str) -> None:
    plugin = add(host, "bytes", {"url": server.url("/hello"), "headers": {"X-A": value}},
                 {"http:127.0.0.1"})
    message = refused(plugin, "invalid", 2)
    assert "printable ASCII" in message and "Traceback" not in message
    assert server.seen == []
    healthy(host, server)


def test_an_internationalised_host_is_sent_in_its_ascii_spelling(host: Host,
                                                                  server: Loopback) -> None:
    # Full-width letters map to "localhost" (UTS 46): the grant, the lookup and the Host
    # header all see that one spelling.
    url = f"http://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54:{server.port}/hello"
    plugin = add(host, "idn", {"url": url}, {"http:localhost", "http:127.0.0.1"})
    answer = plugin.call("test").value
    assert answer["status"] == 200 and answer["body"] == b"hi"
    assert server.seen[-1]["headers"]["host"] == f"localhost:{server.port}"
    # Not the operator's "localhost" grant: the same name is refused without it.
    other = add(host, "idn-ungranted", {"url": url}, {"http:127.0.0.1"})
    assert "not granted" in refused(other, "denied", 2)
    healthy(host, server)


@pytest.mark.parametrize("name", ["\u2603.example", "a\u200db.example", "xn--\u00e9.example",
                                  "\u0661\u0031.example"])
def test_a_host_that_is_no_valid_idn_is_invalid(host: Host, server: Loopback,
                                                name: str) -> None:
    plugin = add(host, "bad-idn", {"url": f"http://{name}/"}, {"http:*"})
    message = refused(plugin, "invalid", 2)
    assert "internationalised" in message and "Traceback" not in message
    healthy(host, server)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_a_host_name_is_ascii_or_invalid(name: str) -> None:
    try:
        _, host, _, _ = split_url(f"http://{name}/")
    except Refused as exc:
        host, code = "", exc.code
    else:
        code = "ok"
    assert code in ("ok", "invalid") and host.isascii()


def test_a_grant_for_an_internationalised_name_matches_its_ascii_spelling() -> None:
    grants = {"http:*.b\u00fccher.example", "http:\u2603"}
    assert host_allowed(grants, "shop.xn--bcher-kva.example")
    assert host_allowed(grants, ascii_host("shop.B\u00dcCHER.example"))
    assert not host_allowed(grants, "xn--bcher-kva.example.evil")
    assert not host_allowed(grants, "xn--n3h")  # an invalid pattern grants nothing


def test_an_injected_value_that_is_not_ascii_is_invalid_and_unnamed(host: Host,
                                                                    server: Loopback) -> None:
    secret = "t\u00f6ken-s3cr3t-\u2603"
    wasm = fetch_wasm({"url": server.url("/echo")})
    plugin = Plugin(host.runtime.compile(wasm, "umlaut"), plugin_id="umlaut",
                    settings={"token": secret}, sensitive=frozenset({"token"}),
                    grants=frozenset({"http", "http:127.0.0.1"}), services=host.runtime.services)
    host.add(plugin)
    host.http.inject_header("umlaut", "127.0.0.1", "Authorization", "token", scheme="http",
                            port=server.port)
    message = refused(plugin, "invalid", 2)
    assert "not ASCII" in message and secret not in message and "s3cr3t" not in message
    assert server.seen == []
    healthy(host, server)
