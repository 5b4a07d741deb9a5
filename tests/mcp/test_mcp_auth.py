"""Bearer-token auth of `mcp serve --http` (wasmext.mcp.server.auth), at the HTTP level."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st
from interop_support import FINE, TIMEOUT, http_serve, served_http, write_plugin

from wasmext import ConfigError, HostConfig
from wasmext.mcp.server.auth import is_loopback, load_token, rebinding_guard, require_token_for
from wasmext.testing import make_host

TOKEN = "0123456789abcdef-token"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}}


def post(url: str, headers: dict[str, str]) -> int:
    """The HTTP status of an initialize request (a 401 must say `WWW-Authenticate: Bearer`)."""
    request = urllib.request.Request(url, data=json.dumps(INIT).encode(), method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream",
                                              **headers})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        challenge = err.headers.get("WWW-Authenticate")
        code = int(err.code)
    return code if code != 401 or challenge == "Bearer" else -1


def test_401_without_the_token_200_with_it(tmp_path: Path) -> None:
    with make_host((FINE, {"plugin_id": "fine"}),
                   config=HostConfig(data_dir=tmp_path / ".wasmext")) as host, \
            served_http(host, token=TOKEN) as url:
        assert post(url, {}) == 401
        assert post(url, {"Authorization": "Bearer wrong"}) == 401
        assert post(url, {"Authorization": f"Basic {TOKEN}"}) == 401
        assert post(url, {"Authorization": f"Bearer {TOKEN}"}) == 200


def test_token_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    assert load_token(path) == TOKEN
    monkeypatch.setenv("MCP_T", TOKEN)
    assert load_token(token_env="MCP_T") == TOKEN
    assert load_token() is None
    path.write_text("short\n")
    with pytest.raises(ConfigError, match="at least 16"):
        load_token(path)
    with pytest.raises(ConfigError, match="not both"):
        load_token(path, "MCP_T")
    with pytest.raises(ConfigError, match="needs a bearer token"):
        require_token_for("0.0.0.0", None)
    require_token_for("127.0.0.1", None)
    require_token_for("::1", None)
    require_token_for("0.0.0.0", TOKEN)


@given(st.text(max_size=40))
def test_loopback_parser_never_raises(address: str) -> None:
    assert is_loopback(address) in (True, False)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


# Every loopback address, also the ones the MCP library does not recognise by name.
LOOPBACKS = ["127.0.0.1", "127.0.0.2", "127.1.2.3"] + (
    ["::1", "0:0:0:0:0:0:0:1"] if _ipv6_loopback() else [])


def assert_rebinding_refused(url: str, canonical: str) -> None:
    """A rebound name in Host (421) or Origin (403) is refused, quickly; then the server
    still answers its loopback names."""
    port = urlsplit(url).port
    started = time.monotonic()
    assert post(url, {"Host": f"evil.example:{port}"}) == 421
    assert post(url, {"Host": "evil.example"}) == 421
    assert post(url, {"Host": f"127.0.0.1.evil.example:{port}"}) == 421
    assert post(url, {"Host": f"{canonical}:{port}",
                      "Origin": f"http://evil.example:{port}"}) == 403
    assert post(url, {"Host": f"{canonical}:{port}", "Origin": "http://evil.example"}) == 403
    assert time.monotonic() - started < 10
    assert post(url, {"Host": f"{canonical}:{port}"}) == 200
    assert post(url, {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"}) == 200


@pytest.mark.parametrize("address", LOOPBACKS)
def test_every_loopback_address_refuses_dns_rebinding(tmp_path: Path, address: str) -> None:
    canonical = "[::1]" if ":" in address else address
    with make_host((FINE, {"plugin_id": "fine"}),
                   config=HostConfig(data_dir=tmp_path / ".wasmext")) as host, \
            served_http(host, address) as url:
        assert_rebinding_refused(url, canonical)


def test_the_cli_on_another_loopback_address_refuses_dns_rebinding(tmp_path: Path) -> None:
    write_plugin(tmp_path / "plugins", "fine", FINE)
    with http_serve(tmp_path / "plugins", tmp_path, address="127.0.0.5") as url:
        assert_rebinding_refused(url, "127.0.0.5")


@given(st.text(max_size=40))
def test_the_rebinding_guard_covers_exactly_loopback(address: str) -> None:
    guard = rebinding_guard(address)
    assert (guard is not None) == is_loopback(address)
    if guard is not None:
        assert guard.enable_dns_rebinding_protection
        assert all(h.endswith(":*") for h in guard.allowed_hosts)
