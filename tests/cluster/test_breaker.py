"""The breaker counts failures as evidence: overlapping ones are one event; the
caller's stats keep the newest latencies."""

from __future__ import annotations

import time

from wasmext.cluster.breaker import Breaker


def test_failures_in_a_row_open_it() -> None:
    breaker = Breaker(3, 60)
    for _ in range(2):
        breaker.failed(time.monotonic())
    assert breaker.state == "closed"
    breaker.failed(time.monotonic())
    assert breaker.state == "open" and not breaker.allow()


def test_attempts_in_flight_together_count_once() -> None:
    """Six requests lost with one killed worker: one failure, then the retries succeed."""
    breaker = Breaker(5, 60)
    sent = time.monotonic()
    time.sleep(0.001)
    for _ in range(6):
        breaker.failed(sent)
    assert breaker.state == "closed" and breaker.failures == 1
    breaker.succeeded()
    assert breaker.failures == 0


def test_a_late_failure_of_an_old_attempt_does_not_reopen_after_the_trial() -> None:
    breaker = Breaker(1, 0.05)
    old = time.monotonic()
    time.sleep(0.001)
    breaker.failed(time.monotonic())
    assert breaker.state == "open"
    time.sleep(0.06)
    assert breaker.allow()  # the trial goes out
    breaker.failed(old)  # an attempt from before the circuit opened
    assert breaker.state == "half_open"
    breaker.failed(time.monotonic())  # the trial's own failure
    assert breaker.state == "open"


def test_without_a_start_time_every_failure_counts() -> None:
    breaker = Breaker(2, 60)
    breaker.failed()
    breaker.failed()
    assert breaker.state == "open"


def test_remote_stats_keep_the_newest_latencies_and_their_quantiles() -> None:
    from wasmext.cluster.remote import _SAMPLES, RemoteStats

    stats = RemoteStats()
    assert stats.quantile(0.5) is None
    for ms in range(_SAMPLES + 300):
        stats.observe(float(ms))
    assert len(stats.latencies_ms) == _SAMPLES
    assert sorted(stats.latencies_ms) == [float(ms) for ms in range(300, _SAMPLES + 300)]
    assert stats.quantile(0.0) == 300.0 and stats.quantile(1.0) == _SAMPLES + 299.0
