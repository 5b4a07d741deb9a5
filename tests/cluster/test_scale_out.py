"""Workers come and go under load: kill -9, one added, SIGTERM drains.

These workers serve under the prefix `scale`, apart from the shared ones."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_support import registry

from wasmext import Host, HostConfig, PipelineResult, parse_policy
from wasmext.cluster.link import NatsLink
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.runtime import Runtime

P = "scale"


@pytest.fixture
def app() -> Iterator[Host]:
    with Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as host:
        yield host


class Load:
    """`total` pipeline runs from `threads` threads; each result kept by its trace id."""

    def __init__(self, app: Host, router: Router, total: int, threads: int = 6,
                 pause_s: float = 0.0) -> None:
        self.app, self.router, self.total, self.pause_s = app, router, total, pause_s
        self.results: dict[str, PipelineResult] = {}
        self.errors: list[BaseException] = []
        self._next = 0
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._next >= self.total:
                    return
                n, self._next = self._next, self._next + 1
            try:
                with self.app.session() as s:
                    result = self.router.run(s, f"m{n}", trace_id=f"trace-{n}")
                with self._lock:
                    self.results[f"trace-{n}"] = result
            except BaseException as exc:
                with self._lock:
                    self.errors.append(exc)
            time.sleep(self.pause_s)

    def start(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def done(self) -> int:
        with self._lock:
            return len(self.results) + len(self.errors)

    def wait_until(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.done() < count:
            assert time.monotonic() < deadline, f"only {self.done()} of {count} done"
            time.sleep(0.01)

    def join(self) -> None:
        for t in self._threads:
            t.join(120)


def _router(link: NatsLink, **changes: dict[str, Any]) -> Router:
    return Router(parse_policy({"pre": [{"id": "stamp", "mode": "required"}]}),
                  RemoteCaller(registry(P, **changes), link))


def test_a_killed_worker_loses_nothing(worker: Any, nats_url: str, app: Host) -> None:
    w1, _w2 = worker("w1", prefix=P), worker("w2", prefix=P)
    with NatsLink(nats_url) as link:
        router = _router(link, stamp={"timeout_ms": 1000, "retry": 3})
        load = Load(app, router, total=300, pause_s=0.002).start()
        load.wait_until(60)
        w1.proc.kill()  # SIGKILL: no drain, in-flight requests vanish with it
        load.join()
    assert load.errors == []
    assert sorted(load.results) == sorted(f"trace-{n}" for n in range(300))
    assert all(r.message["payload"] == "stamped" and r.message["message_id"] == trace
               for trace, r in load.results.items())
    stats = router.caller.stats["stamp"] if router.caller else None
    assert stats is not None and stats.ok == stats.calls == 300 and stats.failed == 0
    assert stats.by_worker["w1"] >= 1  # it served before it died ...
    assert stats.by_worker["w2"] > stats.by_worker["w1"]  # ... and w2 took the rest
    assert sum(stats.by_worker.values()) == 300


def test_a_worker_added_under_load_takes_a_share(worker: Any, nats_url: str,
                                                 app: Host) -> None:
    worker("w1", prefix=P)
    with NatsLink(nats_url) as link:
        router = _router(link)
        load = Load(app, router, total=100_000, threads=4, pause_s=0.002).start()
        load.wait_until(30)
        stats = router.caller.stats["stamp"] if router.caller else None
        assert stats is not None
        before = set(stats.by_worker)
        worker("w2", prefix=P)
        target = load.done() + 200
        load.wait_until(target)
        load.total = 0  # stop
        load.join()
    assert before == {"w1"}
    assert load.errors == []
    assert stats.by_worker["w2"] >= 40  # about half of the ~200 runs after it joined


def test_sigterm_drains_without_failing_in_flight_requests(worker: Any, nats_url: str,
                                                           app: Host) -> None:
    w1 = worker("w1", concurrency=1, prefix=P)
    with NatsLink(nats_url) as link:
        router = Router(parse_policy({"pre": [{"id": "slow", "mode": "required"}]}),
                        RemoteCaller(registry(P), link))  # slow: no retry, 10 s timeout
        load = Load(app, router, total=32, threads=32).start()
        load.wait_until(1)  # requests are queued on the single worker now
        assert w1.signal(signal.SIGTERM) == 0
        load.join()
    assert load.errors == []
    assert len(load.results) == 32
    assert all(r.message["payload"] == "slow" for r in load.results.values())
