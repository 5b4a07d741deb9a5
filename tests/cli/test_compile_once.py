"""`wasmext build` compiles once: the same inputs give the same bytes (without running the
toolchain again), what it builds goes into the host's compile cache so the first load
reads it, and a cold compile on a terminal shows a spinner naming the module."""

from __future__ import annotations

import io
import os
import pty
import shutil
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest
from rich.console import Console

from wasmext import CompileCache, Runtime
from wasmext_cli.ui import compile_spinner

ROOT = Path(__file__).resolve().parents[2]
C_HELLO = ROOT / "guest-sdks" / "c" / "examples" / "hello"
PY_HELLO = ROOT / "guest-sdks" / "python" / "examples" / "hello"


def _env(tmp_path: Path) -> dict[str, str]:
    """The CLI's environment: this checkout, and caches (compile and build outputs) of
    the test's own."""
    # An outer WASMEXT_BUILD_OUTPUTS (a CI's own cache) would move the kept outputs.
    outer = {k: v for k, v in os.environ.items() if k != "WASMEXT_BUILD_OUTPUTS"}
    return {**outer, "XDG_CACHE_HOME": str(tmp_path / "xdg"),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}


def cli(*args: str, tmp_path: Path, cwd: Path | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=cwd or tmp_path,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=timeout)


def host_cache(tmp_path: Path) -> CompileCache:
    """The compile cache a host reads under the test's XDG_CACHE_HOME (a fresh object:
    nothing shared in memory with an earlier load)."""
    return CompileCache(tmp_path / "xdg" / "wasmext" / "modules")


def copy_plugin(source: Path, folder: Path) -> Path:
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns(
        "*.wasm", "*.stamp", "__pycache__"))
    return folder


@pytest.fixture
def hello(tmp_path: Path) -> Path:
    pytest.importorskip("ziglang", reason="the zig toolchain (pip install 'wasmext[build]')")
    return copy_plugin(C_HELLO, tmp_path / "hello")


def test_the_first_load_after_a_build_does_not_compile(hello: Path, tmp_path: Path) -> None:
    proc = cli("build", str(hello), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "compiling hello.wasm for the host" in proc.stderr
    cache = host_cache(tmp_path)
    with Runtime(cache=cache) as rt:
        assert rt.load(hello).call("greet", "Ada").value == "Hello, Ada!"
    assert (cache.hits, cache.misses, cache.rejected) == (1, 0, 0)
    again = cli("build", str(hello), tmp_path=tmp_path)  # up to date, already compiled
    assert again.stdout.startswith("up to date ") and "compiling" not in again.stderr


def test_no_compile_leaves_the_compile_to_the_first_load(hello: Path, tmp_path: Path) -> None:
    proc = cli("build", "--no-compile", str(hello), tmp_path=tmp_path)
    assert proc.returncode == 0 and "compiling" not in proc.stderr, proc.stderr
    cache = host_cache(tmp_path)
    with Runtime(cache=cache) as rt:
        rt.load(hello)
    assert (cache.hits, cache.misses) == (0, 1)


def test_the_same_inputs_give_the_same_bytes_without_the_toolchain(hello: Path,
                                                                    tmp_path: Path) -> None:
    assert cli("build", str(hello), tmp_path=tmp_path).returncode == 0
    wasm = hello / "hello.wasm"
    first = wasm.read_bytes()
    wasm.unlink()  # as a clean checkout or `git clean` leaves it
    (hello / ".hello.wasm.stamp").unlink()
    again = cli("build", str(hello), tmp_path=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "as built before from these inputs" in again.stdout
    assert "step" not in again.stderr and wasm.read_bytes() == first
    forced = cli("build", "--force", str(hello), tmp_path=tmp_path)
    assert "c step 1/1" in forced.stderr  # --force runs the compiler whatever is kept


def test_a_kept_output_that_is_not_a_module_is_built_again(hello: Path,
                                                           tmp_path: Path) -> None:
    assert cli("build", str(hello), tmp_path=tmp_path).returncode == 0
    kept = list((tmp_path / "xdg" / "wasmext" / "builds").glob("*.wasm"))
    assert len(kept) == 1
    kept[0].write_bytes(b"not wasm")
    (hello / "hello.wasm").unlink()
    again = cli("build", str(hello), tmp_path=tmp_path)
    assert "c step 1/1" in again.stderr and (hello / "hello.wasm").read_bytes()[:4] == b"\0asm"


def test_a_cold_compile_is_announced_with_the_module_name(hello: Path,
                                                          tmp_path: Path) -> None:
    assert cli("build", "--no-compile", str(hello), tmp_path=tmp_path).returncode == 0
    heard: list[str] = []

    def observe(name: str) -> nullcontext[None]:
        heard.append(name)
        return nullcontext()

    cache = host_cache(tmp_path)
    cache.on_compile = observe
    with Runtime(cache=cache) as rt:
        rt.load(hello)
    assert heard == [str(hello / "hello.wasm")]
    warm = host_cache(tmp_path)
    warm.on_compile = observe
    with Runtime(cache=warm) as rt:
        rt.load(hello)  # read from the cache: nothing compiles, nothing is announced
    assert heard == [str(hello / "hello.wasm")] and warm.hits == 1


def test_the_spinner_is_for_terminals_and_shows_the_name_as_text() -> None:
    assert compile_spinner(Console(file=io.StringIO(), force_terminal=False)) is None
    out = io.StringIO()
    spinner = compile_spinner(Console(file=out, force_terminal=True))
    assert spinner is not None
    with spinner("/plugins/x/[red]evil\x1b]0;title\x07.wasm"):
        pass
    text = out.getvalue()
    assert "compiling [red]evil" in text  # markup shown, not interpreted
    assert "\x1b]0;" not in text and "\x07" not in text  # the name's controls are gone


def _stderr_on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal; (exit code, stdout, stderr)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "wasmext_cli", *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
                            env={**env, "TERM": "xterm"})
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    stdout = proc.stdout.read() if proc.stdout else b""
    return proc.wait(timeout=120), stdout.decode(), seen.decode(errors="replace")


@pytest.mark.parametrize("command", [["inspect"], ["call", "--data", '"Ada"'], ["list"]])
def test_a_cold_compile_on_a_terminal_shows_a_spinner(hello: Path, tmp_path: Path,
                                                      command: list[str]) -> None:
    assert cli("build", "--no-compile", str(hello), tmp_path=tmp_path).returncode == 0
    args = {"inspect": ["inspect", str(hello)],
            "call": ["call", str(hello), "greet", *command[1:]],
            "list": ["list", "--plugins", str(tmp_path)]}[command[0]]
    code, stdout, stderr = _stderr_on_a_terminal(args, _env(tmp_path))
    assert code == 0, stderr
    assert "compiling hello.wasm (first load; cached afterwards)" in stderr
    assert "compiling" not in stdout and "hello" in stdout.lower()  # the answer stays clean
    code, again, stderr = _stderr_on_a_terminal(args, _env(tmp_path))
    assert code == 0 and "compiling" not in stderr  # the second load reads the cache
    assert again == stdout


def test_piped_output_has_no_spinner(hello: Path, tmp_path: Path) -> None:
    assert cli("build", "--no-compile", str(hello), tmp_path=tmp_path).returncode == 0
    proc = cli("call", str(hello), "greet", "--data", '"Ada"', tmp_path=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == '"Hello, Ada!"'
    assert proc.stderr == ""


@pytest.mark.slow
def test_python_component_builds_are_the_same_bytes_and_load_compiled(tmp_path: Path) -> None:
    pytest.importorskip("componentize_py", reason="pip install 'wasmext[python-plugins]'")
    folder = copy_plugin(PY_HELLO, tmp_path / "hello")
    first = cli("build", str(folder), tmp_path=tmp_path, timeout=900)
    assert first.returncode == 0, first.stderr
    wasm = folder / "hello.wasm"
    built = wasm.read_bytes()
    wasm.unlink()
    (folder / ".hello.wasm.stamp").unlink()
    second = cli("build", str(folder), tmp_path=tmp_path, timeout=900)
    assert second.returncode == 0 and "as built before" in second.stdout, second.stderr
    assert wasm.read_bytes() == built
    assert "compiling" not in second.stderr  # the same bytes: compiled already
    cache = host_cache(tmp_path)
    with Runtime(cache=cache) as rt:
        assert rt.load(folder).call("greet", "Ada").value == "Hello, Ada!"
    assert (cache.hits, cache.misses) == (1, 0)


def _one_source_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    """A C plugin folder of one source, x.c, whose kept outputs stay in tmp_path; the
    tests give it their own build commands."""
    monkeypatch.setenv("WASMEXT_BUILD_OUTPUTS", str(tmp_path / "kept"))
    folder = tmp_path / name
    folder.mkdir()
    (folder / "plugin.toml").write_text(f'id = "{name}"\nversion = "0.1.0"\nabi = 1\n'
                                        '[build]\nlang = "c"\nsources = ["x.c"]\n')
    (folder / "x.c").write_text("int x;\n")
    return folder


def test_a_build_whose_first_step_writes_a_lock_file_is_stamped(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """Like `npm install` before componentize-js: the install writes the lock file (an
    input) and is left out of the next build's steps; the build is stamped anyway, so
    the next one (the scaffold's test, say) does not run the toolchain again."""
    import wasmext_cli.build as build

    folder = _one_source_plugin(tmp_path, monkeypatch, "locked")

    def steps(spec: object, plugin_dir: Path, out: Path) -> list[list[str]]:
        final = [sys.executable, "-c", "import sys; open(sys.argv[1], 'wb')"
                 ".write(b'\\0asm\\1\\0\\0\\0')", str(out)]
        if (plugin_dir / "x.lock").is_file():
            return [final]
        install = [sys.executable, "-c", "open('x.lock', 'w').write('pinned')"]
        return [install, final]

    monkeypatch.setattr(build, "commands_for", lambda _lang: steps)
    first = build.build_plugin(folder)
    assert not first.up_to_date and (folder / "x.lock").read_text() == "pinned"
    assert build.build_plugin(folder).up_to_date  # stamped by the first build
    (folder / "x.c").write_text("int y;\n")
    assert not build.build_plugin(folder).up_to_date


def test_a_build_with_nothing_changed_starts_no_toolchain(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """The stamp's quick fingerprint says "up to date" before the build's commands are
    worked out (for Rust or Go that starts the toolchain). A changed toolchain variable or
    program makes the whole check run again; a changed source, a build."""
    import wasmext_cli.build as build

    folder = _one_source_plugin(tmp_path, monkeypatch, "quick")
    compiler = tmp_path / "bin" / "fakecc"
    compiler.parent.mkdir()
    compiler.write_text(f"#!{sys.executable}\nimport sys\n"
                        "open(sys.argv[1], 'wb').write(b'\\0asm\\1\\0\\0\\0')\n")
    compiler.chmod(0o755)
    worked_out: list[Path] = []

    def steps(spec: object, plugin_dir: Path, out: Path) -> list[list[str]]:
        worked_out.append(out)
        return [[str(compiler), str(out)]]

    monkeypatch.setattr(build, "commands_for", lambda _lang: steps)
    assert not build.build_plugin(folder).up_to_date
    built = (folder / "quick.wasm").stat().st_mtime_ns
    assert len(worked_out) == 1
    assert build.build_plugin(folder).up_to_date
    assert len(worked_out) == 1  # no commands worked out: no toolchain started

    monkeypatch.setenv("WASMEXT_RUSTC", str(tmp_path / "another-rustc"))
    assert build.build_plugin(folder).up_to_date  # the same commands: still up to date
    assert len(worked_out) == 2
    assert build.build_plugin(folder).up_to_date and len(worked_out) == 2  # stamped again

    later = compiler.stat().st_mtime_ns + 10**9
    os.utime(compiler, ns=(later, later))  # the compiler upgraded in place
    assert build.build_plugin(folder).up_to_date and len(worked_out) == 3
    assert (folder / "quick.wasm").stat().st_mtime_ns == built

    (folder / "x.c").write_text("int y;\n")
    assert not build.build_plugin(folder).up_to_date and len(worked_out) == 4


def test_a_plugins_test_starts_no_build_when_nothing_changed(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """wasmext.testing.build_plugin (the scaffold's test calls it first) reads the stamp
    `wasmext build` left: nothing changed, no `wasmext build` process; a changed source,
    the build as before."""
    import wasmext_cli.build as build
    from wasmext import testing

    folder = _one_source_plugin(tmp_path, monkeypatch, "tested")
    monkeypatch.setattr(build, "commands_for", lambda _lang: lambda spec, d, out: [
        [sys.executable, "-c", "import sys; open(sys.argv[1], 'wb').write(b'\\0asm\\1\\0\\0\\0')",
         str(out)]])
    assert not build.build_plugin(folder).up_to_date
    started: list[object] = []

    def no_process(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        started.append(args)
        return subprocess.CompletedProcess(args, 1, "", "wasmext build: refused by the test")

    monkeypatch.setattr(subprocess, "run", no_process)
    assert testing.build_plugin(folder) == folder / "tested.wasm"
    assert started == []
    (folder / "x.c").write_text("int y;\n")
    with pytest.raises(AssertionError, match="refused by the test"):
        testing.build_plugin(folder)
    assert len(started) == 1
