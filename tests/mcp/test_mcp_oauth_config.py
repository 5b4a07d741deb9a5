"""The `oauth` table of [mcp.servers.*] and the token file codec: one-line errors that
name the server and field and never a secret; the codec round-trips and reads any
other bytes as absent (Hypothesis); the redirect address parser."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from wasmext.config import load_config
from wasmext.errors import ConfigError, McpAuthError
from wasmext.mcp.oauth.provider import authorization_code_from
from wasmext.mcp.oauth.store import decode, encode

URL = "https://mcp.example.com/mcp"


def parse(tmp_path: Path, server: str) -> object:
    path = tmp_path / "wasmext.toml"
    path.write_text(f"[host]\ndata_dir = \"{tmp_path / 'data'}\"\n{server}")
    return load_config(path)


def refused(tmp_path: Path, server: str) -> str:
    with pytest.raises(ConfigError) as err:
        parse(tmp_path, server)
    message = err.value.message
    assert "\n" not in message
    return message


HTTP = '[mcp.servers.remote]\ntransport = "http"\nurl = "https://mcp.example.com/mcp"\n'


def test_defaults_and_substitution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCOPE_A", "tools")
    cfg = parse(tmp_path, HTTP + '[mcp.servers.remote.oauth]\nscopes = ["${SCOPE_A}", "x"]\n')
    oauth = cfg.mcp_servers[0].oauth  # type: ignore[attr-defined]
    assert oauth.grant == "authorization_code" and oauth.scope == "tools x"
    assert oauth.redirect_uri == "http://127.0.0.1:33418/callback"
    assert oauth.callback == "loopback" and oauth.authorize_timeout_s == 300.0


def test_stdio_servers_are_refused_naming_the_server(tmp_path: Path) -> None:
    message = refused(tmp_path, '[mcp.servers.calc]\ncommand = "python"\n'
                                '[mcp.servers.calc.oauth]\nscopes = ["a"]\n')
    assert "mcp.servers.calc.oauth" in message and "calc is stdio" in message


@pytest.mark.parametrize(("table", "field", "why"), [
    ('bogus = 1', "bogus", "unknown field"),
    ('grant = "implicit"', "grant", "input should be"),
    ('scopes = "tools"', "scopes", "tuple"),
    ('scopes = ["two words"]', "scopes", "one word"),
    ('authorize_timeout_s = 0', "authorize_timeout_s", "seconds"),
    ('authorize_timeout_s = true', "authorize_timeout_s", "number"),
    ('redirect_uri = "https://example.com/cb"', "redirect_uri", "loopback"),
    ('redirect_uri = "http://127.0.0.1/cb"', "redirect_uri", "PORT"),
    ('redirect_uri = "http://127.0.0.1:99999/cb"', "redirect_uri", "PORT"),
    ('client_id = "a"', "client_id", "client_credentials"),
    ('grant = "client_credentials"', "client_id", "needs a client_id"),
    ('grant = "client_credentials"\nclient_id = "a"', "client_secret", "needs client_secret"),
    ('grant = "client_credentials"\nclient_id = "a"\nclient_secret = "hunter2-secret"',
     "issuer", "issuer"),
    ('client_secret = "hunter2-secret"\nclient_secret_file = "f"', "client_secret_file",
     "not both"),
    ('grant = "client_credentials"\nclient_id = "a"\nclient_secret_file = "missing.txt"',
     "client_secret_file", "cannot read"),
])
def test_each_problem_is_one_line_naming_the_field(tmp_path: Path, table: str, field: str,
                                                   why: str) -> None:
    message = refused(tmp_path, HTTP + "[mcp.servers.remote.oauth]\n" + table + "\n")
    assert f"mcp.servers.remote.oauth.{field}" in message, message
    assert why.lower() in message.lower(), message
    assert "hunter2" not in message


def test_a_wrongly_typed_secret_is_not_echoed(tmp_path: Path) -> None:
    message = refused(tmp_path, HTTP + '[mcp.servers.remote.oauth]\n'
                                       'client_secret = ["hunter2-secret"]\n')
    assert "client_secret" in message and "hunter2" not in message


def test_client_secret_file_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "robot.secret").write_text("  from-a-file-0123\n")
    cfg = parse(tmp_path, HTTP + '[mcp.servers.remote.oauth]\ngrant = "client_credentials"\n'
                                 'client_id = "robot"\nclient_secret_file = "robot.secret"\n'
                                 'issuer = "https://auth.example.com"\n')
    oauth = cfg.mcp_servers[0].oauth  # type: ignore[attr-defined]
    assert oauth.client_secret == "from-a-file-0123"
    assert "from-a-file" not in repr(cfg)


tokens = st.builds(OAuthToken, access_token=st.text(min_size=1),
                   expires_in=st.none() | st.integers(0, 10**8),
                   scope=st.none() | st.text(), refresh_token=st.none() | st.text())
clients = st.builds(OAuthClientInformationFull, client_id=st.text(min_size=1),
                    client_secret=st.none() | st.text(min_size=1),
                    redirect_uris=st.none() | st.just(["http://127.0.0.1:33418/callback"]),
                    client_name=st.none() | st.text(min_size=1),
                    issuer=st.none() | st.just("https://auth.example.com"))


@settings(max_examples=150, deadline=None)
@given(tokens=st.none() | tokens, client=st.none() | clients,
       now=st.floats(0, 2e9, allow_nan=False))
def test_the_token_file_round_trips(tokens: OAuthToken | None,
                                    client: OAuthClientInformationFull | None,
                                    now: float) -> None:
    data = encode(URL, tokens, client, now)
    back_tokens, back_client = decode(data, URL, now)
    assert back_client == client
    if tokens is None:
        assert back_tokens is None
    else:
        assert back_tokens is not None
        assert back_tokens.access_token == tokens.access_token
        assert back_tokens.refresh_token == tokens.refresh_token
        assert back_tokens.scope == tokens.scope
        if tokens.expires_in is None:
            assert back_tokens.expires_in is None
        else:  # counted again from now: at most a second lost to the float
            assert back_tokens.expires_in in (tokens.expires_in, tokens.expires_in - 1)
    later = decode(data, URL, now + 10**9)[0]
    assert later is None or later.expires_in in (None, 0)
    assert decode(data, "https://other.example.com/mcp", now) == (None, None)
    for cut in {0, 1, len(data) // 2, len(data) - 1}:
        assert decode(data[:cut], URL, now) == (None, None)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=400).map(str.encode)
       | st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=20),
                      lambda kids: st.lists(kids, max_size=4)
                      | st.dictionaries(st.sampled_from(
                          ["format", "url", "tokens", "client", "expires_at",
                           "access_token", "client_id"]), kids, max_size=5),
                      max_leaves=20).map(lambda v: json.dumps(v).encode()))
def test_any_other_bytes_read_as_absent_never_raise(data: bytes) -> None:
    tokens, client = decode(data, URL, 1000.0)
    assert tokens is None or isinstance(tokens, OAuthToken)
    assert client is None or isinstance(client, OAuthClientInformationFull)


@settings(max_examples=200, deadline=None)
@given(code=st.text(min_size=1), state=st.none() | st.text(min_size=1),
       base=st.sampled_from(["http://127.0.0.1:33418/callback?", "/callback?", "?", ""]))
def test_redirect_addresses_give_back_the_code(code: str, state: str | None, base: str) -> None:
    params = {"code": code} | ({"state": state} if state is not None else {})
    result = authorization_code_from(base + urlencode(params))
    assert result.code == code and result.state == state


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=500))
def test_any_pasted_text_is_a_code_or_a_named_error(text: str) -> None:
    message = ""
    try:
        assert authorization_code_from(text).code
    except McpAuthError as err:
        message = err.message
    assert "\n" not in message and len(message) < 400


def test_an_error_redirect_is_named_and_cleaned() -> None:
    with pytest.raises(McpAuthError, match="refused: access_denied") as err:
        authorization_code_from("/cb?" + urlencode({"error": "access_denied",
                                                     "error_description": "\x1b[2J" * 500}))
    assert "\x1b" not in err.value.message and len(err.value.message) < 400
