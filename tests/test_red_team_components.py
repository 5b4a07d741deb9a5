"""Red team, second pass: the JSON payload transport, plugin tool schemas served to MCP
clients, and the DNS cache of http.fetch.

Each attack asserts the named error (or the bound that stopped it), that it ends well
within a generous bound, that nothing raw reaches the operator, and that a healthy
plugin answers afterwards. The first pass is tests/test_red_team.py; the component
suites (tests/components/) cover the guests' own JSON and Python attacks.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime

from support import strings_of
from wasmext import Host, HostConfig, Plugin, Runtime
from wasmext.errors import ConfigError, DecodeError
from wasmext.mcp.server.serve import McpToolServer
from wasmext.sandbox import codec
from wasmext.sandbox.jsonwire import SAFE_INT, decode_json, json_request
from wasmext.services.http import guard
from wasmext.services.http.guard import AddressCache, Refused, resolve_target
from wasmext.testing import guest_wat, make_host

ESC = "\x1b]8;;http://evil\x07click\x1b]8;;\x07\x1b[2J\u202e\r\nFAKE LOG LINE"
CPU_BOUND_S = 2.0  # thread CPU time: what the host spends, whatever the machine's load


def registering(registration: Any, response: Any = None) -> bytes:
    """A guest with a registration map of any size (guest_wat places a long one past
    its fixed data)."""
    return bytes(wasmtime.wat2wasm(guest_wat(registration=registration, response=response)))


def inert(text: str, cap: int) -> None:
    """`text` carries no raw control or bidi character and is at most `cap` long."""
    assert len(text) <= cap, len(text)
    assert not any(c in text for c in "\x1b\x07\r\u202e"), text[:200]


def answer(value: bytes) -> bytes:
    return b'{"ok":true,"value":' + value + b"}"


def decoded_within_bound(data: bytes) -> Any:
    """decode_json's result (or its DecodeError, returned), in bounded CPU time."""
    started = time.thread_time()
    try:
        out: Any = decode_json(data)
    except DecodeError as exc:
        out = exc
    assert time.thread_time() - started < CPU_BOUND_S
    return out


# -- the JSON payload transport (sandbox.jsonwire) ------------------------------------------


@pytest.mark.parametrize("literal", [
    b"9" * 4_000_000,                       # an integer of 4 M digits: never int()-parsed
    b"1e99999999999999999999999999999",     # an exponent past any float
    b"-" + b"9" * 400,                      # -1e400 as an integer
    b"0." + b"0" * 2_000_000 + b"1e2000401",  # 1e-2000001 scaled to 1e400
    b"1" + b"0" * 2_000_000 + b"e-1999000",   # a huge mantissa scaled to 1e1000
])
def test_numbers_beyond_a_float64_are_out_of_range_in_bounded_cpu(literal: bytes) -> None:
    out = decoded_within_bound(answer(literal))
    assert isinstance(out, DecodeError) and "out of range" in str(out), out
    inert(str(out), 200)


@pytest.mark.parametrize(("literal", "value"), [
    (b"-0", 0),
    (b"-0.0", -0.0),
    (str(SAFE_INT).encode(), SAFE_INT),
    (str(SAFE_INT + 1).encode(), float(SAFE_INT)),   # as the guest's engine held it
    (str(2**63).encode(), float(2**63)),              # never a uint64 the host trusts
    (str(-(2**64)).encode(), -float(2**64)),
    (b"0." + b"9" * 1_000_000, 1.0),                  # long but in range: read in C
])
def test_numbers_are_read_as_a_float64_engine_held_them(literal: bytes, value: Any) -> None:
    out = decoded_within_bound(answer(literal))
    assert not isinstance(out, DecodeError), out
    assert out["value"] == value and type(out["value"]) is type(value)


@pytest.mark.parametrize(("data", "why"), [
    (b"\xef\xbb\xbf" + answer(b"1"), "starts with '{'"),   # a BOM before the brace
    (b" " + answer(b"1"), "starts with '{'"),
    (b"\x7b", "malformed JSON"),                              # the mark alone
    (answer(b"1") + b"\x00", "Extra data"),                   # a C string's NUL
    (answer(b"1") + "\u00a0".encode(), "Extra data"),         # whitespace JSON does not know
    (answer(b"1") + "\u2028".encode(), "Extra data"),
    (b'{"ok":true,"value":"\x1b\x07"}', "malformed JSON"),   # raw controls inside a string
])
def test_framing_tricks_around_a_json_answer_are_refused(data: bytes, why: str) -> None:
    out = decoded_within_bound(data)
    assert isinstance(out, DecodeError) and why in str(out), out
    inert(str(out), 200)


def test_escaped_quotes_cannot_hide_nesting_from_the_depth_bound() -> None:
    # A string ending in an escaped backslash, then real brackets: the bracket count
    # outside strings must see them, or the recursive parser would go 70_000 deep.
    tricks = [b'["\\\\",' + b"[" * 70_000 + b"]" * 70_000 + b"]",
              b'["\\\\\\"",' + b"[" * 70_000 + b"]" * 70_000 + b"]",
              b'["\\"' + b'",' + b"[" * 70_000 + b"]" * 70_000 + b"]"]
    for value in tricks:
        out = decoded_within_bound(answer(value))
        assert isinstance(out, DecodeError) and "nesting deeper than 64" in str(out), out
    # Brackets inside a string are text: a value of 100_000 of them is read.
    out = decoded_within_bound(answer(b'"' + b"[{" * 100_000 + b'"'))
    assert out["value"] == "[{" * 100_000


def _map(*pairs: tuple[str, Any]) -> bytes:
    """A MessagePack map with the given pairs, duplicates kept (msgpack.packb would merge)."""
    return bytes([0x80 | len(pairs)]) + b"".join(msgpack.packb(k) + msgpack.packb(v)
                                                 for k, v in pairs)


@pytest.mark.parametrize("pairs", [
    (("ok", True), ("value", 1), ("ok", False)),
    (("ok", False), ("error", {"code": "x", "message": "no"}), ("ok", True), ("value", 2)),
    (("ok", True), ("value", "first"), ("value", "second")),
])
def test_duplicate_envelope_keys_mean_the_same_in_both_codecs(pairs: Any) -> None:
    """A repeated key cannot make the JSON reading of an answer differ from the
    MessagePack one (the last one wins in both), so no codec is a way around a check."""
    import json
    text = "{" + ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in pairs) + "}"
    assert decode_json(text.encode()) == codec.decode(_map(*pairs))


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("data", [
    {"n": SAFE_INT + 1},        # JSON would round it in the guest
    {"b": b"\x00bytes"},        # JSON has no bytes
    {"f": float("nan")},
    {"s": "\ud800"},            # a lone surrogate
    {"k": {1: "int key"}},
    {"d": nested(70)},        # deeper than the ABI's 64
])
def test_requests_that_json_would_change_go_as_messagepack(data: dict[str, Any]) -> None:
    assert json_request({"hook": "h", "data": data}, 64, 1 << 20) is None


def test_a_request_over_the_size_cap_is_never_sent_as_json() -> None:
    assert json_request({"hook": "h", "data": "x" * 2000}, 64, 1000) is None
    assert json_request({"hook": "h", "data": "x"}, 64, 1000) == b'{"hook":"h","data":"x"}'


def test_hostile_codec_names_are_shown_bounded_and_inert(runtime: Runtime,
                                                         healthy: Plugin) -> None:
    started = time.monotonic()
    plugin = runtime.load(registering({"hooks": [{"hook": "test"}],
                                       "codecs": ["x" * 1_000_000, ESC, "json" + ESC]}),
                          plugin_id="codec-names")
    assert time.monotonic() - started < 10
    for name in plugin.registration.codecs:
        inert(name, 32)
    assert "json" not in plugin.registration.codecs
    assert healthy.call("test").value == "alive"


# -- plugin tool schemas served to MCP clients (services.tools, mcp.server) -----------------


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    with make_host(config=HostConfig(data_dir=tmp_path / ".wasmext",
                                     state_backend="memory")) as h:
        yield h


def tool_plugin(schema: dict[str, Any], **extra: Any) -> bytes:
    reg = {"hooks": [{"hook": "on_tool"}],
           "tools": [{"name": "t", "description": "d", "input_schema": schema, **extra}]}
    return registering(reg, response={"ok": True, "value": "done"})


HEALTHY = bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True, "value": "alive"})))


def still_serving(host: Host) -> None:
    host.add(HEALTHY, plugin_id="healthy")
    assert host.plugins["healthy"].plugin.call("test").value == "alive"


def test_schema_prose_reaches_mcp_clients_cleaned(host: Host) -> None:
    """Before: a tool schema's titles and descriptions went to MCP clients raw (ESC,
    OSC 8 links, bidi overrides, CR), though the tool's own description was cleaned."""
    schema = {"type": "object", "title": "S" + ESC, "description": "about" + ESC * 200,
              "$comment": ESC,
              "properties": {"a": {"type": "string", "description": "the a" + ESC},
                             "title": {"type": "string", "title": ESC}}}
    host.add(tool_plugin(schema, title="T" + ESC), plugin_id="prose")
    served = {t.name: t for t in McpToolServer(host).visible_tools()}["prose__t"]
    for text in strings_of(dict(served.input_schema)):
        inert(text, 4096)
    inert(served.title, 128)
    assert set(served.input_schema["properties"]) == {"a", "title"}  # names kept
    with host.session("s") as session:
        out = host.tools.call("prose__t", {"a": "x"}, session)
    assert out["status"] == "ok", out
    still_serving(host)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a" + ESC: {"type": "string"}}},
    {"type": "object", "properties": {"a\u202ecod.exe": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"enum": ["yes", "no" + ESC]}}},
    {"type": "object", "properties": {"a": {"const": "\x1b[2J"}}},
    {"type": "object", "properties": {"a": {"type": "string", "default": "\r\nFAKE"}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^\u2066x$"}}},
    {"type": "object", "required": ["a\x00"]},
])
def test_schema_strings_that_cleaning_would_change_refuse_the_tool(host: Host,
                                                                   schema: Any) -> None:
    """Before: served to MCP clients as they were. A property name, enum or pattern
    cannot be cleaned without changing what the tool accepts, so the tool is refused
    (the plugin stays loaded) with an inert, bounded problem."""
    started = time.monotonic()
    host.add(tool_plugin(schema), plugin_id="keys")
    assert time.monotonic() - started < 10
    assert "keys__t" not in host.tools.tools
    assert "keys" in host.plugins
    problems = [str(e) for e in host.load_errors if "keys" in str(e)]
    assert problems and "control, format or bidi" in problems[-1]
    inert(problems[-1], 1024)
    assert "keys__t" not in {t.name for t in McpToolServer(host).visible_tools()}
    still_serving(host)


def test_an_output_schema_is_held_to_the_same_rule(host: Host) -> None:
    host.add(tool_plugin({"type": "object"},
                         output_schema={"type": "object", "description": "o" + ESC,
                                        "properties": {"r" + ESC: {}}}), plugin_id="outs")
    assert "outs__t" not in host.tools.tools
    still_serving(host)


def test_a_plugin_tool_never_takes_a_management_tool_name(host: Host) -> None:
    """Plugin tools are `<plugin id>__<name>`: a plugin named like the management tools
    cannot serve one under the management tool's name."""
    from wasmext.mcp.server.manage import MANAGE_TOOLS
    for pid, short in (("wasmext-plugin", "load"), ("wasmext", "plugin_load")):
        reg = {"hooks": [{"hook": "on_tool"}], "tools": [{"name": short}]}
        host.add(bytes(wasmtime.wat2wasm(guest_wat(registration=reg))), plugin_id=pid)
    names = {t.name for t in McpToolServer(host).visible_tools()}
    assert names == {"wasmext-plugin__load", "wasmext__plugin_load"}
    assert not names & set(MANAGE_TOOLS)
    still_serving(host)


# -- the DNS cache of http.fetch (services.http.guard) --------------------------------------


class FakeDns:
    """Answers of a name that the test changes, and how often DNS was asked."""

    def __init__(self, *answers: str) -> None:
        self.answers = [ipaddress.ip_address(a) for a in answers]
        self.asked = 0

    def __call__(self, host: str, port: int) -> list[Any]:
        self.asked += 1
        if host.startswith("fail"):
            raise OSError("no such name")
        return list(self.answers)


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> FakeDns:
    fake = FakeDns("93.184.216.34")
    monkeypatch.setattr(guard, "_lookup", fake)
    return fake


def deadline() -> float:
    return time.monotonic() + 5


def test_a_cached_private_address_is_checked_against_each_callers_grants(dns: FakeDns
                                                                        ) -> None:
    """One plugin granted a private address by name fills the cache; another plugin
    granted only the name gets the cached answer checked against its own grants."""
    dns.answers = [ipaddress.ip_address("10.0.0.7")]
    cache = AddressCache(60)
    named = frozenset({"http:intranet.example", "http:10.0.0.7"})
    assert resolve_target("http://intranet.example/", named, deadline(), cache).address \
        == "10.0.0.7"
    with pytest.raises(Refused) as info:
        resolve_target("http://intranet.example/", frozenset({"http:intranet.example"}),
                       deadline(), cache)
    assert info.value.code == "denied" and dns.asked == 1  # the kept answer, re-judged


def test_a_grant_withdrawn_while_the_name_is_cached_is_enforced(dns: FakeDns) -> None:
    cache = AddressCache(60)
    grants = frozenset({"http:api.example"})
    assert resolve_target("http://api.example/", grants, deadline(), cache).address \
        == "93.184.216.34"
    with pytest.raises(Refused) as info:
        resolve_target("http://api.example/", frozenset({"http:other.example"}),
                       deadline(), cache)
    assert info.value.code == "denied"
    assert dns.asked == 1


def test_a_rebound_name_is_judged_fresh_once_its_entry_expires(dns: FakeDns) -> None:
    now = [0.0]
    cache = AddressCache(5, clock=lambda: now[0])
    grants = frozenset({"http:rebind.example"})
    resolve_target("http://rebind.example/", grants, deadline(), cache)
    dns.answers = [ipaddress.ip_address("127.0.0.1")]  # the attacker's DNS flips
    now[0] = 4.9
    assert resolve_target("http://rebind.example/", grants, deadline(), cache).address \
        == "93.184.216.34"  # the kept public answer: still what is connected to
    now[0] = 5.1
    with pytest.raises(Refused) as info:
        resolve_target("http://rebind.example/", grants, deadline(), cache)
    assert info.value.code == "denied" and dns.asked == 2


def test_failed_lookups_are_not_kept_and_a_name_flood_stays_bounded(dns: FakeDns) -> None:
    cache = AddressCache(60, max_names=64)
    for _ in range(2):
        with pytest.raises(Refused) as info:
            resolve_target("http://fail.example/", frozenset({"http:*"}), deadline(), cache)
        assert info.value.code == "unavailable"
    assert dns.asked == 2
    for i in range(1000):
        resolve_target(f"http://n{i}.example/", frozenset({"http:*"}), deadline(), cache)
    assert len(cache._kept) == 64
    with pytest.raises(Refused):
        resolve_target("http://n999.example/", frozenset({"http:other"}), deadline(), cache)


def test_a_lookup_past_the_deadline_is_a_timeout_not_a_cached_verdict(dns: FakeDns) -> None:
    cache = AddressCache(60)
    with pytest.raises(Refused) as info:
        resolve_target("http://late.example/", frozenset({"http:*"}),
                       time.monotonic() - 1, cache)
    assert info.value.code == "timeout" and dns.asked == 0
    assert resolve_target("http://late.example/", frozenset({"http:*"}), deadline(),
                          cache).address == "93.184.216.34"


def test_config_error_is_the_schema_refusal() -> None:
    """The refusal of a schema string is a ConfigError, like every other schema rule."""
    from wasmext.services.tools import inert_schema
    with pytest.raises(ConfigError, match="control, format or bidi"):
        inert_schema({"enum": ["\x1b"]}, "tool t", "input_schema")
    assert inert_schema({"description": "a\nb\x1b"}, "tool t", "input_schema") == \
        {"description": "a\nb\\x1b"}


def test_one_plugins_stalled_lookups_never_starve_another_plugins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: four shared resolver threads. A plugin asking for names whose DNS stalls
    left each lookup running past its call, and every other plugin's lookups then
    waited past their deadlines (`timeout`). Now a plugin holds at most
    MAX_LOOKUPS_PER_OWNER unanswered lookups (`limit` past that) and a queued lookup
    whose caller left is never run."""
    release = threading.Event()
    ran: list[str] = []

    def stalling(host: str, port: int) -> list[Any]:
        ran.append(host)
        if host.startswith("slow"):
            release.wait(30)
        return [ipaddress.ip_address("93.184.216.34")]

    monkeypatch.setattr(guard, "_lookup", stalling)
    everything = frozenset({"http:*"})
    codes = []
    started = time.monotonic()
    try:
        for i in range(40):
            try:
                resolve_target(f"http://slow{i}.example/", everything,
                               time.monotonic() + 0.05, owner="hostile")
            except Refused as exc:
                codes.append(exc.code)
                inert(str(exc), 200)
        assert codes.count("timeout") == guard.MAX_LOOKUPS_PER_OWNER
        assert set(codes) == {"timeout", "limit"}
        for other in ("healthy", "another"):
            assert resolve_target("http://fast.example/", everything, time.monotonic() + 2,
                                  owner=other).address == "93.184.216.34"
        assert time.monotonic() - started < 10
    finally:
        release.set()
    deadline_s = time.monotonic() + 10
    while guard._unanswered.get("hostile") and time.monotonic() < deadline_s:
        time.sleep(0.01)
    assert "hostile" not in guard._unanswered  # its lookups answered: its slots back
    assert resolve_target("http://slow-again.example/", everything, time.monotonic() + 2,
                          owner="hostile").address == "93.184.216.34"
    assert sum(h.startswith("slow") for h in ran) <= guard.MAX_LOOKUPS_PER_OWNER + 1


# -- plugin resources served over MCP (mcp.server.catalog) ----------------------------------


def resource_plugin(answer: str, resources: list[str] = [],  # noqa: B006 (read only)
                    templates: list[str] = []) -> bytes:  # noqa: B006
    reg = {"hooks": [{"hook": "on_resource"}],
           "resources": [{"uri": u, "name": "r"} for u in resources],
           "resource_templates": [{"uri_template": t, "name": "t"} for t in templates]}
    return registering(reg, response={"ok": True, "value": answer})


def read(host: Host, uri: str) -> Any:
    """resources/read through the MCP server's handler: the text, or the refusal."""
    import anyio
    import mcp_types as types
    from mcp.shared.exceptions import MCPError

    served = McpToolServer(host).catalog

    async def main() -> Any:
        try:
            got = await served.read_resource(None, types.ReadResourceRequestParams(uri=uri))  # type: ignore[arg-type]
        except MCPError as exc:
            return exc
        return got.contents[0].text  # type: ignore[union-attr]
    return anyio.run(main)


@pytest.mark.parametrize("template", [
    "{a}{b}{c}{d}{e}{f}{g}{h}{i}{j}{k}{l}!",         # [^/]+ twelve times, then a miss
    "x" + "{v}x" * 40 + "!",
])
def test_a_backtracking_resource_template_costs_linear_time(host: Host, template: str) -> None:
    """Before: templates matched as a backtracking regex on the server's event loop; one
    resources/read of an unknown 60-character URI with the first template ran for
    hours (ten times longer per variable: 6 took 0.1 s)."""
    host.add(resource_plugin("hijack", templates=[template]), plugin_id="redos")
    host.add(resource_plugin("notes", resources=["notes://today"]), plugin_id="notes")
    started = time.thread_time()
    for uri in ("x" * 60, "x" * 8000, "notes://today"):
        out = read(host, uri)
        assert out == "notes" if uri == "notes://today" else not isinstance(out, str)
    assert time.thread_time() - started < CPU_BOUND_S
    still_serving(host)


@pytest.mark.parametrize(("hostile", "victim", "uri"), [
    ({"resources": ["notes://today"]}, {"resources": ["notes://today"]}, "notes://today"),
    ({"templates": ["notes://{x}"]}, {"templates": ["notes://{day}"]}, "notes://monday"),
    ({"resources": ["notes://monday"]}, {"templates": ["notes://{day}"]}, "notes://monday"),
    ({"templates": ["{scheme}://{x}"]}, {"templates": ["notes://{day}"]}, "notes://monday"),
])
def test_a_plugin_cannot_take_another_plugins_resources(host: Host, hostile: Any,
                                                        victim: Any, uri: str) -> None:
    """Before: a URI claimed by two plugins went to the one whose id sorted first, so
    a plugin named `aaa` listing the same URI, an overlapping template or one URI of
    another's template served it and read what clients asked. Now nobody serves it
    and the refusal names both."""
    host.add(resource_plugin("forged", **hostile), plugin_id="aaa")
    host.add(resource_plugin("genuine", **victim), plugin_id="notes")
    out = read(host, uri)
    assert not isinstance(out, str), out
    assert "aaa" in str(out) and "notes" in str(out) and "served by none" in str(out)
    inert(str(out), 400)
    assert "no resource" in str(read(host, "zzz://x/y"))
    host.unload("aaa")
    assert read(host, uri) == "genuine"  # the conflict gone, the owner serves it
    still_serving(host)


def test_resource_templates_match_as_before() -> None:
    """The linear matcher agrees with RFC 6570 level 1 as the server read it: each
    variable one or more characters other than "/"."""
    import random
    import re

    from wasmext.mcp.server.catalog import match_template

    def regex(template: str, uri: str) -> bool:
        pattern = re.sub(r"\\\{[^{}]*\\\}", "[^/]+", re.escape(template))
        return re.fullmatch(pattern, uri) is not None

    rng = random.Random(7)
    for _ in range(5000):
        template = "".join(rng.choice(["a", "/", "{x}", "b", "{y}", ".", "{"])
                           for _ in range(rng.randint(0, 7)))
        uri = "".join(rng.choice("ab/.{") for _ in range(rng.randint(0, 9)))
        assert match_template(template, uri) == regex(template, uri), (template, uri)
    assert match_template("file:///notes/{day}", "file:///notes/monday")
    assert not match_template("file:///notes/{day}", "file:///notes/a/b")


# -- a hostile NATS worker's answer (cluster.contract) ---------------------------------------


@pytest.mark.parametrize(("body", "why"), [
    (b'{"status":"ok","details":{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}}",
     "nested too deep"),
    (b'{"status":"ok","details":{"a":' + b"9" * 500_000 + b"}}", "out of range"),
    (b'{"status":"ok","details":{"a":1e400}}', "out of range"),
    (b'{"status":"ok","reason":"' + ESC.encode("unicode_escape").replace(b"\\x", b"\\u00")
     + b'","extra":1}', "unknown field"),
    (b"{" * 2_000_000, "over 1048576"),
])
def test_a_workers_hostile_verdict_is_a_named_contract_error(body: bytes, why: str) -> None:
    """A worker's answer is hostile bytes too: deep, huge numbers, unknown fields, over
    the size cap. Each is a ContractError in bounded CPU, its text inert."""
    from wasmext.cluster.contract import Verdict, decode
    from wasmext.errors import ContractError

    started = time.thread_time()
    with pytest.raises(ContractError) as info:
        decode(body, Verdict, peer="extension pii")
    assert time.thread_time() - started < CPU_BOUND_S
    assert why in info.value.message
    inert(info.value.message, 400)
