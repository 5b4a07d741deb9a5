"""Helpers shared by the tests (imported as `support`; conftest holds the fixtures)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SDK_ROOT = ROOT / "guest-sdks"
# Every guest SDK with a conformance plugin takes part in the cross-SDK suite.
SDK_LANGS = sorted(p.parent.parent.name for p in SDK_ROOT.glob("*/conformance/plugin.toml"))


def plugin_dirs() -> dict[str, Path]:
    dirs = {"pii-mask": ROOT / "plugins" / "pii-mask",
            "normalize-text": ROOT / "plugins" / "normalize-text",
            "test-kit": ROOT / "tests" / "plugins" / "test-kit",
            "extism-conformance": ROOT / "tests" / "plugins" / "extism-conformance"}
    for example in ("text-tags", "agent-guard", "turn-audit", "extism-counter"):
        dirs[example] = ROOT / "plugins" / example
    for lang in SDK_LANGS:
        dirs[f"conformance-{lang}"] = SDK_ROOT / lang / "conformance"
        dirs[f"hello-{lang}"] = SDK_ROOT / lang / "examples" / "hello"
    return dirs


@dataclass
class Built:
    """Plugin folders built this run, and why the others could not be."""

    dirs: dict[str, Path] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Path:
        if name in self.missing:
            pytest.skip(self.missing[name])
        if name in self.broken:
            # Only the tests that need this plugin fail, each with the build error.
            pytest.fail(f"building {name} failed: {self.broken[name]}")
        return self.dirs[name]


def run_in_threads(worker: Callable[[int], None], count: int = 4) -> list[BaseException]:
    """Run worker(0..count-1) in threads started together; the errors they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def guarded(i: int) -> None:
        barrier.wait()
        try:
            worker(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
