"""The registry, the policy's stages and the tenant map: parsed strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wasmext import ConfigError, load_config, parse_policy
from wasmext.cluster.registry import load_registry, parse_registry, subject_for
from wasmext.cluster.routing import Router, parse_routing

# The reference's registry, verbatim.
REFERENCE = {
    "normalize_text": {"type": "pre", "subject": "beamline.ext.pre.normalize_text.v1",
                       "timeout_ms": 80, "retry": 0},
    "mask_pii": {"type": "post", "subject": "beamline.ext.post.mask_pii.v1",
                 "timeout_ms": 100, "retry": 0},
    "pii_guard": {"type": "validator", "subject": "beamline.ext.validate.pii_guard.v1",
                  "timeout_ms": 100, "retry": 0},
    "my_crm_summarizer": {"type": "provider", "subject": "beamline.provider.my_crm_summarizer.v1",
                          "timeout_ms": 5000, "retry": 1}}
REFERENCE_POLICY = {
    "policy_id": "support_en",
    "pre": [{"id": "normalize_text", "mode": "required", "config": {"lowercase": True}}],
    "validators": [{"id": "pii_guard", "on_fail": "block"}],
    "providers": ["openai:gpt-4.1-mini", "my_crm_summarizer"],
    "post": [{"id": "mask_pii", "mode": "required", "config": {"mask_email": True}}]}


def test_the_reference_registry_and_policy_load(tmp_path: Path) -> None:
    path = tmp_path / "registry.json"
    path.write_text(json.dumps(REFERENCE))
    reg = load_registry(path)
    assert reg["my_crm_summarizer"].retry == 1 and reg["pii_guard"].timeout_ms == 100
    policy = parse_policy(REFERENCE_POLICY)
    assert policy.pre[0].config == {"lowercase": True}
    for ext in reg.values():  # the reference subjects are exactly what a worker serves
        assert ext.subject == subject_for("beamline", ext.type, ext.id, 1)


def test_extensions_in_wasmext_toml(tmp_path: Path) -> None:
    path = tmp_path / "wasmext.toml"
    path.write_text('[extensions.pii_guard]\ntype = "validator"\n'
                    'subject = "wasmext.ext.validate.pii_guard.v1"\ntimeout_ms = 100\n'
                    'retry = 2\nencoding = "msgpack"\nbreaker = { failures = 3, reset_ms = 50 }\n')
    ext = load_config(path).extensions["pii_guard"]
    assert (ext.retry, ext.encoding, ext.breaker_failures, ext.breaker_reset_ms) == \
        (2, "msgpack", 3, 50)
    path.write_text('[extensions.pii_guard]\ntype = "validator"\nsubject = "a.b"\nretries = 2\n')
    with pytest.raises(ConfigError, match=r"'extensions\.pii_guard\.retries': unknown field"):
        load_config(path)


@pytest.mark.parametrize(("entry", "why"), [
    ({"type": "pre", "subject": "a.b", "timeout": 5}, r"'extensions\.x\.timeout': unknown field"),
    ({"type": "preprocessor", "subject": "a.b"}, "type"),
    ({"type": "pre", "subject": "a.*"}, "wildcards"),
    ({"type": "pre", "subject": "a..b"}, "subject"),
    ({"type": "pre", "subject": "a.b", "timeout_ms": 0}, "timeout_ms"),
    ({"type": "pre", "subject": "a.b", "retry": True}, "retry"),
    ({"type": "pre", "subject": "a.b", "encoding": "xml"}, "encoding"),
    ({"type": "pre", "subject": "a.b", "breaker": {"open": 1}}, "breaker"),
])
def test_bad_registry_entries_are_refused_by_name(entry: dict[str, Any], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        parse_registry({"x": entry})


@given(st.dictionaries(st.text(max_size=8), st.dictionaries(
    st.sampled_from(["type", "subject", "timeout_ms", "retry", "encoding", "breaker", "zz"]),
    st.none() | st.integers(-5, 10**7) | st.text(max_size=12)
    | st.sampled_from(EXT := ["pre", "validator", "post", "provider", "a.b", "json"]),
    max_size=6), max_size=4))
def test_the_registry_parser_accepts_or_names_the_problem(raw: dict[str, Any]) -> None:
    try:
        parsed = parse_registry(raw)
    except ConfigError as err:
        fields = [fld for fld, _ in err.problems]
    else:
        assert set(parsed) == set(raw)
        assert all(e.type in EXT[:4] for e in parsed.values())
        return
    assert fields and all(fld.startswith("extensions") for fld in fields)


@pytest.mark.parametrize("stage", [{"id": "x", "retry": 1}, {"id": "x", "on_fail": "block"},
                                   {"id": "x", "timeout_ms": 10}])
def test_unknown_stage_keys_are_refused(stage: dict[str, Any]) -> None:
    key = next(k for k in stage if k != "id")
    with pytest.raises(ConfigError, match=rf"'policy\.pre\[0\]\.{key}': unknown field"):
        parse_policy({"pre": [stage]})
    with pytest.raises(ConfigError, match=r"'policy\.validators\[0\]\.mode': unknown field"):
        parse_policy({"validators": [{"id": "x", "mode": "optional"}]})


def test_the_tenant_map_is_strict() -> None:
    with pytest.raises(ConfigError, match=r"'policy\.tenants\.acme\.disabled': unknown field"):
        parse_routing({"tenants": {"acme": {"disabled": ["x"]}}})
    with pytest.raises(ConfigError, match=r"'policy\.tenants\.acme\.disable': must be an array"):
        parse_routing({"tenants": {"acme": {"disable": "x"}}})
    with pytest.raises(ConfigError, match=r"'policy\.tenants\.acme\.policy\.stages': unknown"):
        parse_routing({"tenants": {"acme": {"policy": {"stages": []}}}})


@given(st.dictionaries(st.sampled_from(["policy", "disable", "config", "x"]),
                       st.none() | st.text(max_size=5) | st.lists(st.text(max_size=5))
                       | st.dictionaries(st.text(max_size=5), st.dictionaries(
                           st.text(max_size=3), st.integers())), max_size=3))
def test_the_tenant_parser_accepts_or_names_the_problem(tenant: dict[str, Any]) -> None:
    try:
        routing = parse_routing({"pre": [{"id": "a"}], "tenants": {"t": tenant}})
    except ConfigError as err:
        fields = [fld for fld, _ in err.problems]
    else:
        assert "t" in routing.tenants
        return
    assert fields and all(fld.startswith("policy.tenants.t") for fld in fields)


def test_a_stage_registered_as_another_type_is_refused(nats_free_caller: Any) -> None:
    with pytest.raises(ConfigError, match="registered as a pre, used as a validator"):
        Router(parse_policy({"validators": [{"id": "stamp"}]}), nats_free_caller)


@pytest.fixture
def nats_free_caller() -> Any:
    """A caller with a registry and no connection (construction only checks types)."""
    from cluster_support import registry

    from wasmext.cluster.remote import RemoteCaller

    return RemoteCaller(registry(), link=None)  # type: ignore[arg-type]
