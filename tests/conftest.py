"""Shared fixtures: a fresh Runtime per test, guest plugins built when first needed.

One cache folder serves the whole run (`pytest_configure`): the controller points
XDG_CACHE_HOME at it before pytest-xdist starts the workers, so the workers, every
CLI and script a test starts, and `wasmext build` share one compile cache and one
set of kept build outputs, and each component (a 16-90 s compile) compiles once per
run, never into the user's own ~/.cache/wasmext. A test about the cache itself
gives its process or CLI a folder of its own.

And the skip rule: a test skipped because a toolchain or server is missing is a
failure in CI (`CI=true`), where `.ci/run` installs everything; locally it stays a
skip, and the run ends with one line per missing part saying how to install it.
Skips that no install can lift (a backend that has no such feature, a machine
without IPv6 loopback) are listed in BY_DESIGN and stay skips everywhere.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from loopback import Loopback, loopback
from support import CACHE_ENV, Built, run_cache, run_cache_home, start_first
from wasmext import CompileCache, Plugin, Runtime
from wasmext.testing import guest_wat, load_wat

# Properties assert behaviour, never speed: on a loaded 2-core runner an example that
# takes longer than Hypothesis's 200 ms default deadline is not a failure.
settings.register_profile("wasmext", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("wasmext")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # a pytest-xdist worker: it inherited what the controller set below
    home = run_cache_home()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    # The compilers' own caches stay where they are kept outside tests (Go's, and the
    # Zig folder `wasmext build` uses), warmed by `make toolchains`: content-addressed,
    # safe to share, and a cold Zig libc or Go standard library costs a minute a run.
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    os.environ.setdefault("GOCACHE", str(user_cache / "go-build"))
    os.environ.setdefault("ZIG_GLOBAL_CACHE_DIR", str(user_cache / "wasmext-zig"))  # as the CLI
    os.environ[CACHE_ENV] = str(home)
    os.environ["XDG_CACHE_HOME"] = str(home)  # the compile cache and kept builds


# Modules whose first tests build what costs tens of seconds of a core on a cold cache (a
# component, every SDK's conformance plugin, a Rust test binary) or run that long. Under
# pytest-xdist each worker is first handed a contiguous slice of the collection and runs
# it in order (work stealing then takes from the slices' ends), so a module like these
# collected in the middle of a slice started its build minutes into the run, and a
# worker still building when the others ran dry ended the run late. They go to the
# front of the slices instead, dealt one at a time in this order (the costliest first),
# each kept whole for its module-scoped fixtures.
START_FIRST = (
    "tests/sdks/test_minor1_sdks.py",  # the JavaScript component and every SDK's plugin
    "tests/components/test_component_attacks.py",  # the hostile Python component
    "tests/components/test_component_backend.py",  # the Python conformance component
    "tests/sdks/test_rust_sdk.py",  # the SDK's native test binary and its plugins
    "tests/sdks/test_assemblyscript_sdk.py",
    "tests/sdks/test_answer_region_sdks.py",
    "tests/sdks/test_rust_toolchain.py",
)


@pytest.hookimpl(trylast=True)  # after `-m` deselected: the slices xdist cuts
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    for name in START_FIRST:  # a renamed module would silently start late again
        if not (config.rootpath / name).is_file():
            raise pytest.UsageError(f"conftest.START_FIRST names {name}, which is not a file")
    if workers > 1:  # every worker orders its identical collection the same way
        items[:] = start_first(items, workers, START_FIRST)


@pytest.fixture(autouse=True)
def _thaw_after() -> Iterator[None]:
    """A `wasmext` command run in this process freezes its heap (`[host] gc_freeze`):
    thawed after each test, so the suite's garbage stays collectable."""
    yield
    if gc.get_freeze_count():
        gc.unfreeze()


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The cyclic collector off for the test (as latency-minded applications run it):
    only reference counts free what is dropped, so every cycle made is still there."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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
    """The run's compile cache folder (support.run_cache_home): kept between runs in
    $WASMEXT_TEST_COMPONENT_CACHE or ~/.cache/wasmext-tests; the cache authenticates
    what it reads, so a stale or foreign entry is recompiled, never trusted."""
    return run_cache_home() / "wasmext"


@pytest.fixture
def crt() -> Iterator[Runtime]:
    """A runtime whose compile cache is the run's (support.run_cache): what `built`
    compiled, another worker or a CLI compiled, is read, not compiled again."""
    with Runtime(cache=run_cache()) as rt:
        yield rt
