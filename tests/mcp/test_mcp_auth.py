"""Bearer-token auth of `mcp serve --http` (wasmext.mcp.server.auth), at the HTTP level."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from interop_support import FINE, TIMEOUT, served_http

from wasmext import ConfigError, HostConfig
from wasmext.mcp.server.auth import is_loopback, load_token, require_token_for
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
