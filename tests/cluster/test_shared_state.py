"""Two workers on one Redis state backend: a stage reads the same state on either,
under the grants of wasmext.toml (keyed to the module's digest), as in-process."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from cluster_support import free_port, registry

from wasmext import Host, HostConfig, PipelineError, parse_policy
from wasmext.cluster.link import NatsLink
from wasmext.cluster.remote import RemoteCaller
from wasmext.cluster.routing import Router
from wasmext.runtime import Runtime
from wasmext.sandbox.codec import encode
from wasmext.state import Scope
from wasmext.testing import DATA_AT, guest_wat

HOST_CALL = '(import "wasmext" "host_call" (func $host_call (param i32 i32) (result i64)))'


@pytest.fixture
def redis_url() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (tests/state/setup-redis.sh installs it)")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(10)


def _recall_plugin(parent: Path) -> str:
    """A validator answering whatever `state.get verdict` (plugin scope) answers."""
    request = msgpack.packb({"op": "state.get", "key": "verdict", "scope": "plugin"})
    wat = guest_wat(f"(call $host_call (i32.const {DATA_AT}) (i32.const {len(request)}))",
                    imports=HOST_CALL, data=request,
                    registration={"hooks": [{"hook": "validator"}], "name": "recall"})
    wasm = bytes(wasmtime.wat2wasm(wat))
    folder = parent / "recall"
    folder.mkdir(parents=True)
    (folder / "plugin.toml").write_text('id = "recall"\nversion = "1.0.0"\nabi = 1\n')
    (folder / "recall.wasm").write_bytes(wasm)
    return hashlib.sha256(wasm).hexdigest()


def test_workers_share_state_through_redis(spawn: Any, nats_url: str, redis_url: str,
                                           tmp_path: Path) -> None:
    digest = _recall_plugin(tmp_path / "plugins")
    config = tmp_path / "wasmext.toml"
    config.write_text(f'[state]\nbackend = "redis"\nurl = "{redis_url}"\n'
                      f'[plugins]\nworkspace_dir = "plugins"\n'
                      f'[grants.recall]\ndigest = "sha256:{digest}"\ncapabilities = ["state"]\n'
                      # A worker's first read connects to Redis inside the call: on a
                      # loaded machine that alone has outlasted the default 1 s.
                      '[plugin.recall]\nlimits = { timeout_ms = 5000 }\n')
    from wasmext.state.redis.store import RedisStore

    store = RedisStore(url=redis_url)
    store.set(Scope("recall"), "verdict", encode({"status": "reject", "reason": "from redis"}))
    for name in ("r1", "r2"):
        spawn(name, "worker", "--nats", nats_url, "--config", str(config), "--name", name,
              "--prefix", "shared").wait_ready()
    reg = registry("shared")
    reg["recall"] = type(reg["stamp"])("recall", "validator",
                                       "shared.ext.validate.recall.v1", 5000)
    with NatsLink(nats_url) as link, \
            Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as app:
        caller = RemoteCaller(reg, link)
        router = Router(parse_policy({"validators": [{"id": "recall"}]}), caller)
        for _ in range(20):
            with app.session() as s, pytest.raises(PipelineError, match="recall: from redis"):
                router.run(s, "x")
        assert set(caller.stats["recall"].by_worker) == {"r1", "r2"}  # both read Redis
        store.set(Scope("recall"), "verdict", encode({"status": "ok"}))
        with app.session() as s:
            assert router.run(s, "x").blocked is False
    store.close()


def test_without_the_grant_the_worker_refuses_state(spawn: Any, nats_url: str,
                                                    redis_url: str, tmp_path: Path) -> None:
    _recall_plugin(tmp_path / "plugins")
    config = tmp_path / "wasmext.toml"
    config.write_text(f'[state]\nbackend = "redis"\nurl = "{redis_url}"\n'
                      f'[plugins]\nworkspace_dir = "plugins"\n')
    spawn("r0", "worker", "--nats", nats_url, "--config", str(config), "--name", "r0",
          "--prefix", "nogrant").wait_ready()
    reg = {"recall": type(registry()["stamp"])("recall", "validator",
                                               "nogrant.ext.validate.recall.v1", 5000)}
    with NatsLink(nats_url) as link, \
            Host(HostConfig(), runtime=Runtime(cache=False), plugin_dirs=[]) as app, \
            app.session() as s, pytest.raises(PipelineError, match="not granted 'state'"):
        Router(parse_policy({"validators": [{"id": "recall"}]}),
               RemoteCaller(reg, link)).run(s, "x")
