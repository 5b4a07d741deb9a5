"""Helpers shared by the tests (imported as `support`; conftest holds the fixtures)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import pytest

from wasmext import CompileCache, Runtime
from wasmext.testing import vector_value

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "abi" / "vectors"
SDK_ROOT = ROOT / "guest-sdks"
# Every guest SDK with a conformance plugin takes part in the cross-SDK suite.
SDK_LANGS = sorted(p.parent.parent.name for p in SDK_ROOT.glob("*/conformance/plugin.toml"))


CACHE_ENV = "WASMEXT_TEST_COMPONENT_CACHE"


def run_cache_home() -> Path:
    """The test run's cache folder (XDG_CACHE_HOME of every process the run starts):
    $WASMEXT_TEST_COMPONENT_CACHE, else wasmext-tests in the user's cache folder."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wasmext-tests"


def run_cache() -> CompileCache:
    """A new handle on the run's compile cache: the one a CLI the tests start uses."""
    home = run_cache_home() / "wasmext"
    return CompileCache(home / "modules", home / "cache.key")


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mib() -> float:
    """This process's resident memory now, in MiB (Linux; skips the test elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        pytest.skip("no /proc/self/statm")
    return pages * 4096 / 2**20


def refused_at_load(runtime: Any, wasm: bytes, match: str, healthy: Any, *,
                    plugin_id: str, within_s: float = 10.0, growth_mib: float = 32) -> None:
    """`runtime.load(wasm)` refused as ModuleTooLarge (`match`) within `within_s` (a
    refusal reads section headers; the machine running CI is shared) and `growth_mib`
    of this process's memory (the bytes, mostly), `healthy` answering after."""
    from wasmext import ModuleTooLarge

    before = rss_mib()
    started = time.monotonic()
    with pytest.raises(ModuleTooLarge, match=match):
        runtime.load(wasm, plugin_id=plugin_id)
    assert time.monotonic() - started < within_s
    assert rss_mib() - before < growth_mib
    assert healthy.call("test", "ping").value == "alive"


def uleb128(n: int) -> bytes:
    """`n` as an unsigned LEB128 number, as WebAssembly writes lengths and counts."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def plugin_dirs() -> dict[str, Path]:
    dirs = {"pii-mask": ROOT / "plugins" / "pii-mask",
            "normalize-text": ROOT / "plugins" / "normalize-text",
            "test-kit": ROOT / "tests" / "plugins" / "test-kit",
            "extism-conformance": ROOT / "tests" / "plugins" / "extism-conformance",
            "zig-tags": ROOT / "tests" / "plugins" / "zig-tags",
            "c-files": ROOT / "tests" / "plugins" / "c-files",
            "go-files": ROOT / "tests" / "plugins" / "go-files",
            "event-tally": ROOT / "tests" / "plugins" / "event-tally",
            "sentiment-js": ROOT / "tests" / "plugins" / "sentiment-js",
            "mood-c": ROOT / "tests" / "plugins" / "mood-c",
            "zig-mood": ROOT / "tests" / "plugins" / "zig-mood",
            "go-mood": ROOT / "tests" / "plugins" / "go-mood",
            "as-mood": ROOT / "tests" / "plugins" / "as-mood",
            "rust-mood": ROOT / "tests" / "plugins" / "rust-mood",
            "runtime-tools": ROOT / "tests" / "plugins" / "runtime-tools"}
    for example in ("text-tags", "agent-guard", "turn-audit", "extism-counter", "relay-tools",
                    "json-summary", "json-check", "output-builtins", "sentiment-py"):
        dirs[example] = ROOT / "plugins" / example
    for lang in SDK_LANGS:
        dirs[f"conformance-{lang}"] = SDK_ROOT / lang / "conformance"
        dirs[f"hello-{lang}"] = SDK_ROOT / lang / "examples" / "hello"
    return dirs


@dataclass
class Built:
    """Plugin folders, each built the first time a test asks for it (then kept).

    A plugin whose toolchain is not installed skips the test asking for it, with the
    install command as the reason (in CI, where every toolchain must be there, the
    skip fails the run); any other build failure fails only the tests that need it.
    """

    folders: dict[str, Path] = field(default_factory=lambda: plugin_dirs())
    dirs: dict[str, Path] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Path:
        if name not in self.dirs and name not in self.missing and name not in self.broken:
            self._build(name)
        if name in self.missing:
            pytest.skip(self.missing[name])
        if name in self.broken:
            pytest.fail(f"building {name} failed: {self.broken[name]}")
        return self.dirs[name]

    def _build(self, name: str) -> None:
        from wasmext_cli.build import BuildError, ToolchainMissing

        folder = self.folders[name]
        try:
            build_once(folder)
        except ToolchainMissing as exc:
            self.missing[name] = str(exc)
        except BuildError as exc:
            self.broken[name] = str(exc)
        else:
            self.dirs[name] = folder


Item = TypeVar("Item", bound=pytest.Item)


def _slice_sizes(count: int, workers: int) -> list[int]:
    """How pytest-xdist's work stealing first splits `count` items among `workers`."""
    sizes = []
    for i in range(workers):
        sizes.append(count // (workers - i))
        count -= sizes[-1]
    return sizes


def start_first(items: list[Item], workers: int, first: tuple[str, ...]) -> list[Item]:
    """`items` with the modules named in `first` (paths as in node ids) at the fronts of
    the slices pytest-xdist first hands its `workers`: dealt one module at a time in the
    order of `first`, each module kept whole, everything else in its collected order."""
    groups: dict[str, list[Item]] = {name: [] for name in first}
    rest: list[Item] = []
    for item in items:
        groups.get(item.nodeid.split("::", 1)[0], rest).append(item)
    fronts: list[list[Item]] = [[] for _ in range(workers)]
    for n, group in enumerate(g for g in groups.values() if g):
        fronts[n % workers].extend(group)
    ordered: list[Item] = []
    end = 0
    for front, size in zip(fronts, _slice_sizes(len(items), workers), strict=True):
        end += size
        ordered += front
        take = max(0, end - len(ordered))
        ordered += rest[:take]
        del rest[:take]
    return ordered + rest


def run_in_threads(worker: Callable[[int], None], count: int = 4,
                   switch_interval: float | None = None) -> list[BaseException]:
    """Run worker(0..count-1) in threads started together; the errors they raised.

    `switch_interval` (seconds) sets the interpreter's for as long as they run: a tiny
    one makes the GIL change hands every few bytecodes, to open race windows."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def guarded(i: int) -> None:
        barrier.wait()
        try:
            worker(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    interval = sys.getswitchinterval()
    if switch_interval is not None:
        sys.setswitchinterval(switch_interval)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    return errors


def cancel_call(plugin: Any, hook: str, data: Any, after_s: float = 0.2
                ) -> tuple[BaseException | None, float, float]:
    """Call `plugin` in a worker bound to a call scope and cancel the scope `after_s` into
    the call: (the call's error, seconds it ran, seconds from the cancel to its end)."""
    from wasmext.sandbox.callscope import CallScope

    scope = CallScope()
    out: dict[str, Any] = {}
    started = threading.Event()

    def work() -> None:
        t0 = time.monotonic()
        with scope.bound():
            started.set()
            try:
                plugin.call(hook, data)
            except BaseException as exc:  # handed to the test
                out["error"] = exc
        out["ran"] = time.monotonic() - t0
        out["ended"] = time.monotonic()

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    assert started.wait(30)
    time.sleep(after_s)
    cancelled_at = time.monotonic()
    scope.cancel()
    worker.join(60)
    assert not worker.is_alive(), "the cancelled call is still running"
    return out.get("error"), out["ran"], out["ended"] - cancelled_at


BOUNDARY_INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
                 2**64 - 1, -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1,
                 -(2**63)]
STR_LENGTHS = [0, 31, 32, 255, 256, 65535, 65536]
BIN_LENGTHS = [0, 1, 255, 256, 65535, 65536]
CONTAINER_LENGTHS = [0, 15, 16, 65535, 65536]


def _header(encoded: bytes, payload_len: int) -> str:
    return encoded[:len(encoded) - payload_len].hex()


def msgpack_case_rows() -> list[tuple[str, ...]]:
    """The MessagePack cases native SDK tests read: KIND, NAME, HEX[, ARG], one per row.

    C canonical vector, D decode-only (ARG: the canonical re-encoding), H hostile,
    I integer boundary (ARG: the value), S/B str/bin header (ARG: the length),
    A/M array/map header (ARG: the count).
    """
    vectors = json.loads((VECTORS / "msgpack.json").read_text(encoding="utf-8"))
    hostile = json.loads((VECTORS / "hostile.json").read_text(encoding="utf-8"))
    packer = msgpack.Packer(use_bin_type=True)
    rows: list[tuple[str, ...]] = [("C", v["name"], v["hex"]) for v in vectors["canonical"]]
    rows += [("D", v["name"], v["hex"],
              msgpack.packb(vector_value(v["value"]), use_bin_type=True).hex())
             for v in vectors["decode_only"]]
    rows += [("H", v["name"], v["hex"]) for v in hostile["hostile"]]
    rows += [("I", f"int {i}", msgpack.packb(i).hex(), str(i)) for i in BOUNDARY_INTS]
    rows += [("S", f"str {n}", _header(msgpack.packb("a" * n), n), str(n)) for n in STR_LENGTHS]
    rows += [("B", f"bin {n}", _header(msgpack.packb(b"a" * n, use_bin_type=True), n), str(n))
             for n in BIN_LENGTHS]
    rows += [("A", f"array {n}", packer.pack_array_header(n).hex(), str(n))
             for n in CONTAINER_LENGTHS]
    rows += [("M", f"map {n}", packer.pack_map_header(n).hex(), str(n))
             for n in CONTAINER_LENGTHS]
    return rows


_built_once: dict[Path, Path] = {}  # plugin folder -> its module


def build_once(folder: Path) -> Path:
    """Build a plugin folder at most once per test run, and compile it into the run's
    compile cache (a component takes ~25 s to build and 16-90 s to compile).

    Test processes running side by side (pytest-xdist) take a lock per folder, so one
    builds and compiles while the others wait, then find the output up to date by its
    stamp and its code in the cache. The compile also leaves the component in this
    process's memory, where the next load of the same bytes finds it."""
    built_module(folder)
    return folder


def built_module(folder: Path) -> Path:
    """The module of a plugin folder, built and compiled once per run (build_once)."""
    from wasmext_cli.build import build_plugin

    key = folder.resolve()
    if key not in _built_once:
        digest = hashlib.sha256(str(key).encode()).hexdigest()[:16]
        lock = Path(tempfile.gettempdir()) / f"wasmext-test-build-{digest}.lock"
        with open(lock, "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            try:
                with Runtime(cache=run_cache()) as rt:
                    # A module the host refuses is reported by the test's own load.
                    _built_once[key] = build_plugin(folder, runtime=rt).wasm
            finally:
                fcntl.flock(held, fcntl.LOCK_UN)
    return _built_once[key]


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (its own CA) and its key, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "server.pem", folder / "server-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class Lines(logging.Handler):
    """Every wasmext log line, formatted."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextmanager
def log_lines() -> Iterator[list[str]]:
    """The wasmext log lines written while inside, at every level."""
    handler = Lines()
    logger = logging.getLogger("wasmext")
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


def strings_of(value: Any) -> Iterator[str]:
    """Every string in a JSON-like value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings_of(k)
            yield from strings_of(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_of(v)


def innermost_tool_result(result: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """How many tool results wrap one another in `result` (each level a tool call that
    answered the inner call's result) and the innermost one (a refusal, say)."""
    depth = 0
    while result.get("status") == "ok" and isinstance(result.get("output"), dict):
        result = result["output"]
        depth += 1
    return depth, result


class ParentAtWork:
    """A thread of this (the parent) process calling `step(round)` until the block
    ends, `pause_s` before each round, while a forked child does its part: `failures`
    (the first exception ends the thread) and `rounds` completed, for the test to check."""

    def __init__(self, step: Callable[[int], object], pause_s: float = 0.0) -> None:
        self.step, self.pause_s = step, pause_s
        self.failures: list[str] = []
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="parent-at-work")

    def _work(self) -> None:
        while not self._stop.wait(self.pause_s):
            try:
                self.step(self.rounds)
            except Exception as exc:  # reported to the test
                self.failures.append(repr(exc))
                return
            self.rounds += 1

    def __enter__(self) -> ParentAtWork:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def in_forked_child(child: Callable[[], object], within_s: float = 20) -> tuple[int, str]:
    """Run `child` in a forked process: (exit code, what it reported). The report is the
    repr of what `child` returned, or the last lines of the traceback it raised; the child
    is killed (and the test fails) when it has not ended within `within_s`."""
    import signal
    import traceback

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        code, report = 1, "nothing"
        try:
            report, code = repr(child()), 0
        except BaseException:  # any failure of the child is the test's report
            report = "".join(traceback.format_exc().splitlines(keepends=True)[-12:])
        finally:
            os.write(write_end, report.encode("utf-8", "replace")[:60000])
            os._exit(code)
    os.close(write_end)
    ends = time.monotonic() + within_s
    try:
        while time.monotonic() < ends:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                with os.fdopen(read_end, "rb") as pipe:
                    read_end = -1
                    return os.waitstatus_to_exitcode(status), pipe.read().decode()
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"the forked child did not end within {within_s} s")
    finally:
        if read_end >= 0:
            os.close(read_end)
