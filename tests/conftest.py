"""Shared fixtures: a fresh Runtime per test, guest plugins built when first needed.

And the skip rule: a test skipped because a toolchain or server is missing is a
failure in CI (`CI=true`), where `.ci/run` installs everything; locally it stays a
skip, and the run ends with one line per missing part saying how to install it.
Skips that no install can lift (a backend that has no such feature, a machine
without IPv6 loopback) are listed in BY_DESIGN and stay skips everywhere.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from loopback import Loopback, loopback
from support import Built
from wasmext import CompileCache, Plugin, Runtime
from wasmext.testing import guest_wat, load_wat

# Properties assert behaviour, never speed: on a loaded 2-core runner an example that
# takes longer than Hypothesis's 200 ms default deadline is not a failure.
settings.register_profile("wasmext", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("wasmext")


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    cache = CompileCache(tmp_path / "cache" / "modules", tmp_path / "cache" / "key")
    with Runtime(cache=cache) as rt:
        yield rt


@pytest.fixture
def healthy(runtime: Runtime) -> Plugin:
    """A well-behaved plugin in the same runtime, to prove the host keeps serving."""
    return load_wat(runtime, guest_wat(response={"ok": True, "value": "alive"}),
                    plugin_id="healthy")


@pytest.fixture
def server() -> Iterator[Loopback]:
    """A real HTTP server on loopback (tests/loopback.py) for the test's fetches."""
    with loopback() as srv:
        yield srv


@pytest.fixture(scope="session")
def built() -> Built:
    """Guest plugins by name (support.plugin_dirs), each built when first asked for."""
    return Built()


BY_DESIGN = (
    "staging keys are Redis's",
    "the memory store keeps nothing across processes",
    "this machine has no IPv6 loopback",
)
_missing: dict[str, int] = {}


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, object, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if not reason.startswith(BY_DESIGN) and os.environ.get("CI") == "true":
        report.outcome = "failed"
        report.longrepr = f"CI must not skip for a missing part: {reason}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Runs where the summary is printed (the controller, under pytest-xdist).
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if not reason.startswith(BY_DESIGN):
            _missing[reason] = _missing.get(reason, 0) + 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _missing or os.environ.get("CI") == "true":
        return
    terminalreporter.section("missing toolchains and servers (CI fails on these)")
    for reason, count in sorted(_missing.items()):
        terminalreporter.write_line(f"{count:4d} skipped: {reason}")


@pytest.fixture(scope="session")
def component_cache_dir() -> Path:
    """Compiled components kept between runs (a compile takes 15-30 s), in
    $WASMEXT_TEST_COMPONENT_CACHE or the user's cache folder; the cache authenticates
    what it reads, so a stale or foreign entry is recompiled, never trusted."""
    kept = os.environ.get("WASMEXT_TEST_COMPONENT_CACHE")
    return Path(kept) if kept else Path.home() / ".cache" / "wasmext-tests" / "components"


@pytest.fixture
def crt(component_cache_dir: Path) -> Iterator[Runtime]:
    """A runtime whose compile cache is the run's shared component cache."""
    with Runtime(cache=CompileCache(component_cache_dir / "modules",
                                    component_cache_dir / "key")) as rt:
        yield rt
