"""State store fixtures over the helpers in state_support: a real redis-server for the
run, and a store factory per backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from state_support import (
    BACKENDS,
    NATS_SERVER,
    NO_NATS,
    NO_REDIS,
    REDIS_SERVER,
    FakeClock,
    StoreFactory,
    nats_server,
    redis_server,
    store_factory,
)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A private redis-server for the whole run."""
    if REDIS_SERVER is None:
        pytest.skip(NO_REDIS)
    with redis_server() as (url, _proc):
        yield url


@pytest.fixture(scope="session")
def jetstream_url() -> Iterator[str]:
    """A private nats-server with JetStream for the whole run."""
    if NATS_SERVER is None:
        pytest.skip(NO_NATS)
    with nats_server() as (url, _proc):
        yield url


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "redis" and REDIS_SERVER is None:
        pytest.skip(NO_REDIS)
    if request.param == "jetstream" and NATS_SERVER is None:
        pytest.skip(NO_NATS)
    return str(request.param)


@pytest.fixture
def make_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest,
               ) -> Iterator[StoreFactory]:
    url = request.getfixturevalue(f"{backend}_url") if backend in ("redis", "jetstream") \
        else None
    make, opened = store_factory(backend, tmp_path, url)
    yield make
    for store in opened:
        store.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
