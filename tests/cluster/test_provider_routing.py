"""Providers over NATS: the caller sends each provider's configured `parameters`, the
answer is merged into the metadata earlier stages set, and weights and priorities
order the providers (a real nats-server, the foreign nats-py provider)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from wasmext import ConfigError, Host, HostConfig
from wasmext.cluster.link import NatsLink
from wasmext.cluster.registry import parse_registry
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router, parse_routing
from wasmext.runtime import Runtime

CRM = "wasmext.provider.crm.v1"
REGISTRY = {"shout": {"type": "pre", "subject": "wasmext.ext.pre.shout.v1"},
            "crm": {"type": "provider", "subject": CRM},
            "crm_a": {"type": "provider", "subject": CRM},
            "crm_b": {"type": "provider", "subject": CRM},
            "gone": {"type": "provider", "subject": "wasmext.provider.gone.v1"}}


@pytest.fixture
def caller(nats_url: str) -> Iterator[RemoteCaller]:
    with NatsLink(nats_url, name="provider-test") as link:
        yield RemoteCaller(parse_registry(REGISTRY), link)


@pytest.fixture
def app() -> Iterator[Host]:
    with Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as host:
        yield host


def run(app: Host, router: Router, text: str, **kw: Any) -> Any:
    with app.session() as s:
        return router.run(s, text, {"lang": "en"}, **kw)


def test_the_provider_gets_its_parameters_and_its_answer_is_merged(
        foreign: Any, caller: RemoteCaller, app: Host) -> None:
    routing = parse_routing({
        "pre": [{"id": "shout", "config": {"k": 1}}],
        "providers": [{"id": "crm", "parameters": {"max_tokens": 512, "style": "brief"}}],
        "tenants": {"acme": {"config": {"crm": {"style": "long"}}}}})
    got = run(app, Router(routing, caller), "hi", tenant_id="t-1")
    meta = got.message["metadata"]
    assert got.message["payload"] == "summary of HI"
    # What the pre stage set is still there, beside the provider's own.
    assert meta["tenant"] == "t-1" and meta["config"] == {"k": 1}
    assert meta["source"] == "crm" and meta["provider_id"] == "crm"
    assert meta["parameters"] == {"max_tokens": 512, "style": "brief"}
    assert meta["usage"] == {"prompt_tokens": 2, "completion_tokens": 2}
    # A tenant's `config` for the provider is merged over its parameters.
    acme = run(app, Router(routing, caller), "hi", tenant_id="acme")
    assert acme.message["metadata"]["parameters"] == {"max_tokens": 512, "style": "long"}


def test_weights_share_the_first_try_and_priorities_come_first(
        foreign: Any, caller: RemoteCaller, app: Host) -> None:
    weighted = Router(parse_routing({"providers": [{"id": "crm_a", "weight": 9},
                                                   {"id": "crm_b", "weight": 1}]}), caller)
    firsts = Counter(run(app, weighted, "x").provider for _ in range(200))
    assert set(firsts) == {"crm_a", "crm_b"}
    assert firsts["crm_a"] > 120, firsts  # 9 in 10 expected
    # A lower priority number is tried first, whatever the weights after it; a failing
    # one falls through to the next priority.
    ranked = Router(parse_routing({"providers": [
        {"id": "crm_a", "priority": 2, "weight": 1000},
        {"id": "gone", "priority": 0}, {"id": "crm_b", "priority": 1}]}), caller)
    assert {run(app, ranked, "x").provider for _ in range(20)} == {"crm_b"}
    # Without weights, list order as before.
    plain = Router(parse_routing({"providers": ["crm_b", "crm_a"]}), caller)
    assert {run(app, plain, "x").provider for _ in range(20)} == {"crm_b"}


def test_bad_provider_entries_are_named() -> None:
    with pytest.raises(ConfigError) as err:
        parse_routing({"providers": [{"id": "crm", "weight": 0}, {"id": "x", "prio": 1},
                                     {"id": "y", "parameters": []}]})
    text = err.value.message
    assert "policy.providers[0]" in text and "weight" in text
    assert "prio" in text and "unknown field" in text
    assert "parameters" in text
