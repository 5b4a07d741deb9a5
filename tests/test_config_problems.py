"""A config or manifest with several problems reports them all at once, each naming the
file and the field, with type errors said as types ("must be an integer").

A host config is validated one way (pydantic models, `wasmext.validation`): every
section's problems land in one ConfigError, each with its field path, cleaned and
capped however hostile the file."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
import wasmtime
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wasmext import ConfigError, Host, load_config
from wasmext.config import LimitsTable, StateTable, parse_config
from wasmext.errors import ManifestError
from wasmext.manifest import MANIFEST_TYPES, load_folder, type_problems
from wasmext.sandbox.limits import Limits
from wasmext.services.http.config import HttpSection
from wasmext.services.http.fetch import HttpLimits
from wasmext.services.llm.config import PolicyTable
from wasmext.services.llm.service import LlmPolicy
from wasmext.state import StateLimits
from wasmext.testing import guest_wat
from wasmext.text import is_unsafe
from wasmext.validation import FIELD_CAP, KEPT, REASON_CAP, SHOWN


def test_every_type_problem_of_a_manifest_at_once(tmp_path: Path) -> None:
    (tmp_path / "plugin.toml").write_text(
        'id = "demo"\nversion = "1.0.0"\nabi = "1"\npriority = "high"\n'
        '[build]\nlang = 3\nsources = ["a.c"]\n')
    with pytest.raises(ManifestError) as caught:
        load_folder(tmp_path)
    text = caught.value.describe()
    assert str(tmp_path / "plugin.toml") in text
    for fld in ("'abi': must be an integer", "'priority': must be an integer",
                "'build.lang': must be a string"):
        assert fld in text, fld
    assert "SemVer" not in text and "ABI" not in text  # a type error, not a version message


def test_every_problem_of_a_manifests_mcp_table_at_once(tmp_path: Path) -> None:
    (tmp_path / "plugin.toml").write_text(
        'id = "demo"\nversion = "1.0.0"\n[mcp.servers.x]\ntransport = "sse"\n'
        '[mcp.servers.y]\nroots = ["/etc"]\n')
    with pytest.raises(ManifestError) as caught:
        load_folder(tmp_path)
    assert caught.value.field == "mcp.servers.x.url"
    for part in ("'mcp.servers.x.url': a sse server needs a url",
                 "'mcp.servers.y.command': a stdio server needs a command",
                 "'mcp.servers.y.roots': must be an array of file:// URIs"):
        assert part in caught.value.message, part


def test_every_type_problem_of_a_config_at_once(tmp_path: Path) -> None:
    path = tmp_path / "wasmext.toml"
    path.write_text('[host]\nhooks = "yes"\ndefault_timeout_ms = "soon"\n'
                    '[plugins]\nenabled = "pii-mask"\n[plugin.demo]\npriority = "first"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = caught.value.describe()
    assert text.count("wasmext.toml") == 1
    for fld in ("'host.hooks': must be true or false",
                "'host.default_timeout_ms': must be an integer",
                "'plugins.enabled': must be an array",
                "'plugin.demo.priority': must be an integer"):
        assert fld in text, fld


toml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=8)


@given(st.dictionaries(st.sampled_from(sorted(k.rstrip("!") for k in MANIFEST_TYPES)),
                       toml_values, max_size=6))
def test_type_problems_name_only_fields_of_the_input(data: dict[str, Any]) -> None:
    for fld, word in type_problems(MANIFEST_TYPES, data):
        assert fld.split(".")[0] in data or word == "is required"
        assert word and "\n" not in word


# A bad value in every section: each is one problem, all reported together.
EVERY_SECTION = """
surprise = 1
[host]
hooks = "yes"
[plugins]
enabled = ["Not An Id"]
[limits]
fuel_per_call = 0
[grants.calc]
digest = "md5:hunter2-secret"
[plugin.calc]
failure = "sometimes"
[state]
backend = "redis"
[mcp.servers.x]
transport = "sse"
[trust]
keys = ["ed25519:not-base64!"]
[extensions.guard]
type = "validator"
subject = "a.*"
[llm.default]
max_tokens_per_call = -1
[[http.inject]]
plugin = "calc"
[tracing]
exporter = "zipkin"
"""
EXPECTED = [
    ("surprise", "unknown field"),
    ("host.hooks", "must be true or false"),
    ("plugins.enabled[0]", "not a plugin id"),
    ("limits.fuel_per_call", "must be > 0"),
    ("grants.calc.digest", "must be 'sha256:' and 64"),
    ("plugin.calc.failure", "must be 'open', 'closed' or 'reload'"),
    ("state.url", "the redis backend needs a url"),
    ("mcp.servers.x.url", "a sse server needs a url"),
    ("trust.keys[0]", "public key"),
    ("extensions.guard.subject", "without wildcards"),
    ("llm.default.max_tokens_per_call", "must be > 0"),
    ("http.inject[0].host", "is required"),
    ("tracing.exporter", "must be 'otlp-http', 'otlp-grpc' or 'console'"),
]


def test_every_problem_of_every_section_in_one_error(tmp_path: Path) -> None:
    path = tmp_path / "wasmext.toml"
    path.write_text(EVERY_SECTION)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    err = caught.value
    problems = dict(err.problems)
    for fld, why in EXPECTED:
        assert why in problems.get(fld, ""), (fld, problems)
    assert len(err.problems) == len(EXPECTED) + 2  # http.inject[0]: header and setting too
    assert err.message.startswith(f"{path}: field '")
    shown = err.message.count("field '")
    assert shown == SHOWN and f"and {len(err.problems) - SHOWN} more problems" in err.message
    assert "hunter2" not in err.message  # a value never reaches the message
    assert "hunter2" not in " ".join(f"{f} {w}" for f, w in err.problems)


def test_each_section_problem_alone_names_its_field_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "wasmext.toml"
    path.write_text('[limits]\nfuel_per_call = 0\n[mcp.servers.x]\ntransport = "http"\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.message == (f"{path}: field 'limits.fuel_per_call': must be > 0; "
                                    "field 'mcp.servers.x.url': a http server needs a url")



@pytest.mark.parametrize(("text", "fld", "why"), [
    ("[host]\ninstance_pol = 2\n", "host.instance_pol",
     "unknown field; did you mean 'instance_pool'?"),
    ("[hots]\n", "hots", "unknown field; did you mean 'host'?"),
    ("[plugin.kb]\nsetings = {}\n", "plugin.kb.setings",
     "unknown field; did you mean 'settings'?"),
    ('[mcp.servers.x]\ncommand = "true"\ncomand = "t"\n', "mcp.servers.x.comand",
     "unknown field; did you mean 'command'?"),
    ("[limits]\nfuel = 3\n", "limits.fuel", "unknown field; did you mean 'fuel_per_call'?"),
    ('[agents.rev]\nsystem = "s"\ntimeout_ms = 5\n', "agents.rev.timeout_ms",
     "unknown field (known: factory, max_tokens, model, system, target)"),
    ("[host]\nzzzzzzzzzzzz = 1\n", "host.zzzzzzzzzzzz", "unknown field (known: auto_enable,"),
    ('[grants.kb]\ndigest = "sha256:' + "0" * 64 + '"\n"" = 1\n', 'grants.kb.""',
     "unknown field (known: capabilities, digest, manifest)")])
def test_an_unknown_field_names_the_field_meant_or_those_there_are(
        tmp_path: Path, text: str, fld: str, why: str) -> None:
    """A typo was `unknown field` and nothing else: the operator had to find the section's
    fields in the docs. The field it is near is named, else the table's fields."""
    path = tmp_path / "wasmext.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    problems = dict(caught.value.problems)
    assert problems[fld].startswith(why), problems


def test_a_hostile_unknown_key_stays_bounded_and_inert(tmp_path: Path) -> None:
    path = tmp_path / "wasmext.toml"
    path.write_text('[host]\n"' + "instance_pool\\u001b[31m" * 5000 + '" = 1\n')
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert time.monotonic() - started < 3
    [(fld, why)] = caught.value.problems
    assert len(fld) <= FIELD_CAP and len(why) <= REASON_CAP
    assert not any(is_unsafe(c) for c in fld + why) and "\x1b" not in caught.value.message


@pytest.mark.parametrize(("written", "why"), [
    ("htttp", "the item is not a capability; did you mean 'http'?"),
    ("fs", "the item grants nothing without what it names; write fs:<absolute folder>"),
    ("http:", "the item has an empty pattern; write http:<host pattern>"),
    ("fs:notes-hunter2:rw", "the item names a relative folder"),
    ("toolz:secret-hunter2", "the item is not a capability; did you mean 'tool:...'?")])
def test_a_config_grant_nothing_would_check_is_refused(tmp_path: Path, written: str,
                                                       why: str) -> None:
    """A typo in [grants.ID] capabilities was kept as a grant no op ever asks for: the
    plugin was denied what the operator meant to allow, and nothing said why. The value
    itself stays out of the message, as every config value does."""
    path = tmp_path / "wasmext.toml"
    path.write_text(f'[grants.calc]\ndigest = "sha256:{"0" * 64}"\n'
                    f'capabilities = ["state", "{written}"]\n')
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert [f for f, _ in caught.value.problems] == ["grants.calc.capabilities[1]"]
    assert caught.value.problems[0][1].startswith(why)
    assert "hunter2" not in caught.value.message



def test_a_config_grant_may_name_an_embedders_own_capability(tmp_path: Path) -> None:
    """`rt.services.register("x.lookup", ..., capability="lookup")` (docs/embedding.md):
    the operator grants it in the config; only names close to a known one are typos."""
    path = tmp_path / "wasmext.toml"
    path.write_text(f'[grants.calc]\ndigest = "sha256:{"0" * 64}"\n'
                    'capabilities = ["lookup", "billing:eu", "state"]\n')
    assert load_config(path).grants["calc"].capabilities == {"lookup", "billing:eu", "state"}

def _plugin(root: Path) -> None:
    folder = root / "plugins" / "healthy"
    folder.mkdir(parents=True)
    wat = guest_wat(response={"ok": True, "value": "alive"})
    (folder / "healthy.wasm").write_bytes(wasmtime.wat2wasm(wat))
    (folder / "plugin.toml").write_text('id = "healthy"\nversion = "1.0.0"\n')


def test_a_hostile_config_gets_one_bounded_inert_error(tmp_path: Path) -> None:
    secret = "sk-live-hunter2"
    # TOML escapes for a terminal hyperlink, a bidi override; then length
    evil = r"\u001b]8;;http://x\u0007\u202e" + "k" * 300
    lines = [f'[grants."{evil}{i}"]\ndigest = "{secret}"\n' for i in range(2000)]
    lines.append(f'[llm]\nurl = ["{secret}"]\n')
    path = tmp_path / "wasmext.toml"
    path.write_text("".join(lines))
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert time.monotonic() - started < 30  # generous: the machine is shared
    err = caught.value
    assert len(err.problems) == KEPT  # 4001 found, a bounded number kept
    assert "and 3991 more problems" in err.message
    assert all(len(f) <= FIELD_CAP and len(w) <= REASON_CAP for f, w in err.problems)
    for text in (err.message, err.describe()):
        assert secret not in text and "\x1b" not in text and "\u202e" not in text
        assert "\n" not in text
    assert len(err.message) < 4000
    _plugin(tmp_path)  # the same host still loads a good config, and its plugin answers
    path.write_text('[plugins]\nworkspace_dir = "plugins"\n[host]\ndata_dir = "data"\n')
    with Host(load_config(path)) as host:
        assert host.plugins["healthy"].plugin.call("test").value == "alive"


def test_a_config_full_of_problems_is_reported_in_bounded_time(tmp_path: Path) -> None:
    path = tmp_path / "wasmext.toml"  # near the size cap: 200,000 bad plugin ids
    path.write_text("[plugins]\nenabled = [" + ",".join(['"A"'] * 200_000) + "]\n")
    started = time.monotonic()
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert time.monotonic() - started < 60  # generous: the machine is shared
    assert len(caught.value.problems) == KEPT
    assert caught.value.message.endswith("; and 199990 more problems")
    assert caught.value.problems[-1][0] == f"plugins.enabled[{KEPT - 1}]"


toml_leaves = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
               | st.datetimes() | st.dates() | st.times())
# The keys the models know, so that the values reach the value rules, and some others.
KNOWN_KEYS = sorted({
    "host", "plugins", "limits", "grants", "plugin", "state", "mcp", "trust", "extensions",
    "llm", "http", "data_dir", "hooks", "default_timeout_ms", "user_dir", "enabled",
    "disabled", "cap", "fuel_per_call", "memory_bytes", "max_output_bytes", "digest",
    "capabilities", "settings", "failure", "priority", "backend", "url", "ttl_seconds",
    "max_ttl_seconds", "session_warn_ratio", "servers", "x", "transport", "command", "args",
    "env", "headers", "roots", "oauth", "scopes", "grant", "call_timeout_s", "keys",
    "require_signature", "type", "subject", "breaker", "failures", "encoding", "prices",
    "input", "default", "models", "inject", "header", "setting", "max_redirects"})
toml_ish_dicts = st.recursive(
    toml_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(KNOWN_KEYS) | st.text(max_size=6), inner, max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=6), toml_ish_dicts,
                       max_size=6))
def test_any_toml_ish_document_loads_or_is_one_config_error(data: dict[str, Any]) -> None:
    try:
        parse_config(data)
    except ConfigError as err:  # anything else fails the test
        problems, message = err.problems, err.message
    else:
        return
    assert problems and len(problems) <= KEPT
    assert "\n" not in message
    for fld, why in problems:
        assert len(fld) <= FIELD_CAP and len(why) <= REASON_CAP
        assert not any(is_unsafe(c) for c in fld + why)


def test_each_table_model_has_exactly_its_dataclass_fields() -> None:
    """A field added to Limits (or StateLimits, HttpLimits, LlmPolicy) must get its rule."""
    tables: list[tuple[Any, Any, set[str]]] = [
        (LimitsTable, Limits, set()),
        (StateTable, StateLimits, {"backend", "url", "bucket", "replicas"}),
        (HttpSection, HttpLimits, {"inject"}), (PolicyTable, LlmPolicy, set())]
    for model, kind, own in tables:
        assert set(model.model_fields) - own == {f.name for f in dataclasses.fields(kind)}
