"""A real OCI registry for the run: Debian's docker-registry (the distribution registry)
on a free loopback port, storing into a temporary folder the tests may tamper with."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from support import free_port

REGISTRY = shutil.which("docker-registry")
NO_REGISTRY = "docker-registry is not installed (tests/oci/setup-registry.sh installs it)"


@dataclass(frozen=True)
class Registry:
    """A running registry: its HOST:PORT and the folder its blobs are stored in."""

    address: str
    root: Path

    def blob(self, digest: str) -> Path:
        """The file the registry serves for `digest` (sha256:...)."""
        hex_digest = digest.split(":", 1)[1]
        return (self.root / "docker" / "registry" / "v2" / "blobs" / "sha256"
                / hex_digest[:2] / hex_digest / "data")


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A private docker-registry for the whole run, stopped at the end."""
    if REGISTRY is None:
        pytest.skip(NO_REGISTRY)
    folder = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = folder / "config.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {folder / 'data'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\n")
    proc = subprocess.Popen([REGISTRY, "serve", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("docker-registry did not start")
            time.sleep(0.05)
        yield Registry(f"127.0.0.1:{port}", folder / "data")
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
