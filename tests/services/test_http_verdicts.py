"""http.fetch keeps its last few hundred URL, host and address verdicts, each by the
exact grants it was made under: a kept verdict never lets a request through that
the rules refuse, refusals are judged every time, and the memory is bounded."""

from __future__ import annotations

import time

import pytest

from wasmext.errors import Refused
from wasmext.services.http import guard
from wasmext.services.http.guard import AddressCache, resolve_target

URL = "http://127.0.0.1:8080/x"


def deadline() -> float:
    return time.monotonic() + 5


def test_a_verdict_is_kept_only_for_the_grants_it_was_made_under() -> None:
    named = frozenset({"http", "http:127.0.0.1"})
    assert resolve_target(URL, named, deadline()).address == "127.0.0.1"
    with pytest.raises(Refused) as loopback:  # every host granted, the address not named
        resolve_target(URL, frozenset({"http", "http:*"}), deadline())
    assert loopback.value.code == "denied" and "non-public" in loopback.value.message
    with pytest.raises(Refused) as other:
        resolve_target(URL, frozenset({"http", "http:example.org"}), deadline())
    assert other.value.code == "denied" and "not granted" in other.value.message
    assert resolve_target(URL, named, deadline()).connect_url == URL
    assert resolve_target(URL, {"http", "http:127.0.0.1"}, deadline()).address == \
        "127.0.0.1"  # type: ignore[arg-type]  # a set is judged as its frozenset


def test_a_name_kept_by_the_dns_cache_is_judged_by_each_address_it_answers() -> None:
    answers = {"rebind.example": ["93.184.216.34"]}
    cache = AddressCache(ttl_s=0.05)
    original = guard._resolve

    def resolve(host: str, port: int, limit: float, owner: str = "") -> list[guard.Address]:
        return [guard.ipaddress.ip_address(a) for a in answers[host]]

    guard._resolve = resolve  # type: ignore[assignment]
    try:
        grants = frozenset({"http", "http:rebind.example"})
        assert resolve_target("http://rebind.example/", grants, deadline(), cache).address \
            == "93.184.216.34"
        answers["rebind.example"] = ["169.254.169.254"]  # the metadata service
        time.sleep(0.06)
        with pytest.raises(Refused) as rebound:
            resolve_target("http://rebind.example/", grants, deadline(), cache)
        assert rebound.value.code == "denied"
    finally:
        guard._resolve = original  # type: ignore[assignment]


def test_refusals_are_judged_every_time_and_the_memory_is_bounded() -> None:
    grants = frozenset({"http", "http:*"})
    for _ in range(2):
        with pytest.raises(Refused) as bad:
            resolve_target("ftp://example.org/", grants, deadline())
        assert bad.value.code == "invalid"
    for i in range(2 * guard._VERDICTS):
        resolve_target(f"http://10.0.{i // 256}.{i % 256}/", frozenset(
            {"http", f"http:10.0.{i // 256}.{i % 256}"}), deadline())
    for memo in (guard._split_kept, guard._granted, guard._address_allowed, guard._literal):
        assert memo.cache_info().currsize <= guard._VERDICTS


def test_long_urls_and_hosts_are_not_kept() -> None:
    """HOLE (fixed): the kept URL splits held each URL a plugin sent (up to 8,192
    characters, a redirect's longer) with its path: 512 of them, tens of MiB a plugin
    chose. Only short URLs are kept now, and a host longer than any DNS name is refused
    before any verdict is kept for it."""
    import tracemalloc
    import urllib.parse

    grants = frozenset({"http", "http:*"})
    guard._split_kept.cache_clear()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(guard._VERDICTS):
            url = f"http://api.example/{i}/" + "\U0001f600" * 8000  # 4 bytes a character
            assert guard.split_url(url)[3].startswith(f"/{i}/")
        # Python's own urlsplit keeps its last 128 URLs (3.11+): not ours to bound.
        getattr(urllib.parse.urlsplit, "cache_clear", lambda: None)()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1 << 20, kept  # kept, they held ~32 MiB
    assert guard._split_kept.cache_info().currsize == 0
    for _ in range(2):
        with pytest.raises(Refused) as long_host:
            resolve_target("http://" + "a" * 300 + ".example/", grants, deadline())
        assert long_host.value.code == "invalid" and "253" in long_host.value.message
    assert resolve_target("http://93.184.216.34/ok", grants, deadline()).path == "/ok"
