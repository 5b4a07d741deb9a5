"""`wasmext build`: the current folder by default, --jobs, --verbose, one-line errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wasmext_cli.build.errors import first_error

ROOT = Path(__file__).resolve().parents[2]
C_HELLO = ROOT / "guest-sdks" / "c" / "examples" / "hello"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def hello(tmp_path: Path) -> Path:
    pytest.importorskip("ziglang", reason="the zig toolchain (pip install 'wasmext[build]')")
    folder = tmp_path / "hello"
    shutil.copytree(C_HELLO, folder, ignore=shutil.ignore_patterns("*.wasm", "*.stamp"))
    return folder


def test_build_without_arguments_builds_the_current_folder(hello: Path) -> None:
    proc = cli("build", cwd=hello)
    assert proc.returncode == 0, proc.stderr
    assert (hello / "hello.wasm").is_file()
    assert "building hello: c step 1/1 (ziglang cc)" in proc.stderr  # progress, piped: plain


def test_jobs_and_verbose(hello: Path) -> None:
    other = hello.parent / "other"
    shutil.copytree(hello, other)
    text = (other / "plugin.toml").read_text().replace('id = "hello"', 'id = "other"')
    (other / "plugin.toml").write_text(text)
    proc = cli("build", "--jobs", "2", "--verbose", "hello", "other", cwd=hello.parent)
    assert proc.returncode == 0, proc.stderr
    assert (hello / "hello.wasm").is_file() and (other / "other.wasm").is_file()
    assert proc.stderr.count("$ ") == 2 and "-mexec-model=reactor" in proc.stderr


def test_a_plugin_whose_inputs_did_not_change_is_not_built_again(hello: Path,
                                                                   tmp_path: Path) -> None:
    assert cli("build", cwd=hello).returncode == 0
    wasm = hello / "hello.wasm"
    first = wasm.read_bytes()
    again = cli("build", cwd=hello)
    assert again.returncode == 0 and again.stdout.startswith("up to date ")
    assert "building" not in again.stderr and wasm.read_bytes() == first
    os.utime(hello / "hello.c")  # touched, not changed: still up to date
    assert cli("build", cwd=hello).stdout.startswith("up to date ")
    assert cli("build", "--force", cwd=hello).stdout.startswith("built ")
    wasm.write_bytes(b"\0asm damaged")  # the output replaced behind the stamp's back
    assert cli("build", cwd=hello).stdout.startswith("built ") and wasm.read_bytes() == first
    source = hello / "hello.c"
    source.write_text(source.read_text() + "\n/* a change */\n")
    assert cli("build", cwd=hello).stdout.startswith("built ")
    sdk = tmp_path / "sdks"  # another SDK: WASMEXT_SDK_DIR points elsewhere
    shutil.copytree(ROOT / "guest-sdks" / "c", sdk / "c",
                    ignore=shutil.ignore_patterns("*.wasm", "*.stamp"))
    header = sdk / "c" / "include" / "wasmext.h"
    header.write_text(header.read_text() + "\n/* another SDK */\n")
    env = {"WASMEXT_SDK_DIR": str(sdk)}
    assert cli("build", cwd=hello, env=env).stdout.startswith("built ")
    assert cli("build", cwd=hello, env=env).stdout.startswith("up to date ")


def test_a_compile_error_is_one_line_with_plugin_file_and_first_error(hello: Path) -> None:
    source = hello / "hello.c"
    source.write_text(source.read_text() + "\nint broken( { return nope; }\n")
    line_no = source.read_text().count("\n")
    proc = cli("build", cwd=hello)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    err = lines[-1]
    assert not any(ln.startswith("wasmext:") for ln in lines[:-1])  # progress only before it
    assert err.startswith("wasmext: plugin hello: building hello.c failed: ")
    assert f"hello.c:{line_no}:" in err and "error" in err
    assert "Traceback" not in proc.stderr


def test_a_missing_source_names_the_manifest_field(hello: Path) -> None:
    (hello / "hello.c").unlink()
    proc = cli("build", cwd=hello)
    assert proc.returncode == 1
    assert "plugin hello:" in proc.stderr and "build.sources" in proc.stderr
    assert "plugin.toml" in proc.stderr



@pytest.mark.parametrize("args", [(), ("elsewhere",)])
def test_a_folder_without_plugin_toml_says_it_is_no_project(tmp_path: Path,
                                                              args: tuple[str, ...]) -> None:
    """`wasmext build` in the wrong folder: one line saying what is missing and what to do,
    with "wasmext: " once."""
    (tmp_path / "elsewhere").mkdir()
    proc = cli("build", *args, cwd=tmp_path)
    assert proc.returncode == 1
    where = "elsewhere" if args else "this folder"
    assert proc.stderr.splitlines() == [
        f"wasmext: {where} has no plugin.toml, so it is no plugin project: `wasmext new NAME "
        "--lang LANG` makes one, or give `wasmext build` a plugin folder"]


def test_a_bad_manifest_says_wasmext_once(tmp_path: Path) -> None:
    (tmp_path / "plugin.toml").write_text('id = "Bad"\n')
    proc = cli("build", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("wasmext: manifest: ") and "wasmext: wasmext" not in proc.stderr

RUSTC = """error[E0425]: cannot find value `nope` in this scope
 --> hello.rs:12:5
  |
12 |     nope
  |     ^^^^ not found in this scope
"""
GO = "# example.com/plugin\n./hello.go:9:2: undefined: nope\n"
ASC = "ERROR TS2304: Cannot find name 'nope'.\n   :\n 5 │ nope\n   └─ in hello.ts(5,3)\n"


@pytest.mark.parametrize(("output", "expected"), [
    (RUSTC, "hello.rs:12:5: error[E0425]: cannot find value `nope` in this scope"),
    (GO, "./hello.go:9:2: undefined: nope"),
    (ASC, "hello.ts:5:3: ERROR TS2304: Cannot find name 'nope'."),
    ("", "(the compiler printed nothing)"),
])
def test_first_error_of_each_compiler(output: str, expected: str) -> None:
    assert first_error(output) == expected


@given(st.text(max_size=2000))
def test_first_error_is_always_one_bounded_inert_line(output: str) -> None:
    line = first_error(output)
    assert line and "\n" not in line and "\r" not in line and "\x1b" not in line
    assert len(line) <= 300


def test_another_plugin_in_the_sdk_folder_is_not_an_input(tmp_path: Path) -> None:
    from wasmext.buildstamp import fingerprint

    sdk = tmp_path / "sdk"
    own, other = sdk / "examples" / "own", sdk / "conformance"
    for folder in (own, other):
        folder.mkdir(parents=True)
        (folder / "plugin.toml").write_text('id = "x"\n')
    (sdk / "wasmext.h").write_text("/* the SDK */\n")
    (own / "own.c").write_text("int x;\n")
    out, tmp = own / "own.wasm", tmp_path / "tmp"

    def printed() -> str | None:
        return fingerprint([own, sdk], [["cc", "own.c"]], out, tmp)

    before = printed()
    (other / "conformance.wasm").write_bytes(b"\0asm another build's output")
    (other / "conformance.c").write_text("int changed;\n")
    assert printed() == before  # the conformance plugin's build leaves this one fresh
    (sdk / "wasmext.h").write_text("/* the SDK changed */\n")
    assert printed() != before
    (sdk / "wasmext.h").write_text("/* the SDK */\n")
    (own / "own.c").write_text("int y;\n")
    assert printed() != before


def test_a_build_leaves_only_its_outputs_in_the_plugin_folder(hello: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from wasmext_cli.build import BuildError, build_plugin

    sources = sorted(p.name for p in hello.iterdir())
    declared = sorted([*sources, "hello.wasm", ".hello.wasm.stamp"])
    # Forced builds of one output at once: each waits for the one before (one
    # temporary module at a time), and none leaves its lock or temporary file behind.
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: build_plugin(hello, force=True), range(3)))
    assert all(r.wasm == hello / "hello.wasm" for r in results)
    assert (hello / "hello.wasm").read_bytes().startswith(b"\0asm")
    assert sorted(p.name for p in hello.iterdir()) == declared
    assert build_plugin(hello).up_to_date  # the stamp holds
    source = hello / "hello.c"
    source.write_text(source.read_text() + "\nint broken( {\n")
    with pytest.raises(BuildError, match=r"building hello\.c failed"):
        build_plugin(hello)  # a failed build leaves nothing either
    assert sorted(p.name for p in hello.iterdir()) == declared


def test_each_input_is_read_once_per_fingerprinting(hello: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from collections import Counter

    from wasmext import buildstamp
    from wasmext_cli.build import build_plugin

    reads: Counter[Path] = Counter()  # input files read (not the module or its stamp)
    read_bytes = Path.read_bytes

    def counted(path: Path) -> bytes:
        if path.suffix in (".c", ".h", ".toml"):
            reads[path] += 1
        return read_bytes(path)

    wasm, source = hello / "hello.wasm", hello / "hello.c"
    assert not build_plugin(hello).up_to_date
    assert buildstamp.still_fresh(wasm)
    monkeypatch.setattr(Path, "read_bytes", counted)
    # No change: the quick fingerprint says so.
    assert build_plugin(hello).up_to_date and reads[source] == 1 and max(reads.values()) == 1
    # The toolchain's environment changed, not the inputs: the quick fingerprint differs,
    # the whole one (worked out from the same reading) does not.
    reads.clear()
    monkeypatch.setenv("WASMEXT_UNRELATED_SETTING", "1")
    assert not buildstamp.still_fresh(wasm)
    reads.clear()
    result = build_plugin(hello)
    assert result.up_to_date and result.command  # the commands were worked out
    assert reads[source] == 1 and max(reads.values()) == 1
    assert buildstamp.still_fresh(wasm)  # the stamp now has this environment's quick print
    # A change: read once before the build and once after it (a step may write inputs).
    source.write_text(source.read_text() + f"\n/* a change {os.getpid()} {id(reads)} */\n")
    assert not buildstamp.still_fresh(wasm)
    reads.clear()
    result = build_plugin(hello)
    assert not result.up_to_date and reads[source] == 2 and max(reads.values()) == 2
    assert buildstamp.still_fresh(wasm)


def test_a_build_by_either_name_of_the_interpreter_is_up_to_date_for_the_other(
        hello: Path) -> None:
    """`wasmext build` runs as `.../bin/python3` (the console script's first line) and
    `python -m pytest` as `.../bin/python`: one environment, so neither may make the other's
    build stale (it did: each rewrote the stamp, and a Rust test run started rustc again)."""
    names = [Path(sys.executable).with_name(name) for name in ("python3", "python")]
    if not all(p.exists() for p in names) or len({os.path.realpath(p) for p in names}) != 1:
        pytest.skip("this environment does not have python and python3 for one interpreter")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}

    def build(python: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), "-m", "wasmext_cli", "build"], cwd=hello, env=env,
                              capture_output=True, text=True, timeout=300)

    assert build(names[0]).returncode == 0
    stamp = hello / ".hello.wasm.stamp"
    written = stamp.read_bytes()
    again = build(names[1])
    assert again.stdout.startswith("up to date "), again.stdout + again.stderr
    assert stamp.read_bytes() == written  # up to date by the quick print: nothing rewritten


def test_the_plugins_tests_and_tool_caches_are_not_build_inputs(hello: Path) -> None:
    """An edit of the plugin's test, or a tool's cache folder written (pytest's after a
    failed test, an editor's, a linter's), built a Python plugin again: 20 s of CPU each."""
    assert cli("build", cwd=hello).returncode == 0
    (hello / "test_hello.py").write_text("def test_greet() -> None:\n    pass\n")
    (hello / "conftest.py").write_text("")
    for cache in (".pytest_cache/v/cache", ".mypy_cache", ".ruff_cache", ".vscode"):
        (hello / cache).mkdir(parents=True)
        (hello / cache / "lastfailed").write_text('{"test_hello.py::test_greet": true}')
    again = cli("build", cwd=hello)
    assert again.stdout.startswith("up to date "), again.stdout + again.stderr
    (hello / "test_hello.py").write_text("def test_greet() -> None:\n    assert True\n")
    assert cli("build", cwd=hello).stdout.startswith("up to date ")
    source = hello / "hello.c"  # a source still counts
    source.write_text(source.read_text() + "\n/* a change */\n")
    assert cli("build", cwd=hello).stdout.startswith("built ")


def test_call_and_inspect_of_a_module_older_than_its_sources_say_so(hello: Path) -> None:
    """`wasmext call .` after an edit without `wasmext build` ran the old module, and
    said nothing: the author saw the old answer and took the edit for wrong."""
    assert cli("build", cwd=hello).returncode == 0
    fresh = cli("call", ".", "greet", "--data", '"Ada"', cwd=hello)
    assert fresh.returncode == 0 and fresh.stderr == "", fresh.stderr
    os.utime(hello / "hello.c")  # touched, not changed
    (hello / "test_hello.py").write_text("")  # the tests are not the module's sources
    assert cli("call", ".", "greet", "--data", '"Ada"', cwd=hello).stderr == ""
    source = hello / "hello.c"
    source.write_text(source.read_text() + "\n/* an edit */\n")
    for args in (("call", ".", "greet", "--data", '"Ada"'), ("inspect", ".")):
        stale = cli(*args, cwd=hello)
        assert stale.returncode == 0, stale.stderr
        assert stale.stderr == ("wasmext: plugin hello: hello.wasm is older than its "
                                "sources (the folder's or its SDK's); this is the module "
                                "built before (run: wasmext build .)\n"), stale.stderr
    assert '"Hello, Ada!"' in cli("call", ".", "greet", "--data", '"Ada"', cwd=hello).stdout
    assert cli("build", cwd=hello).returncode == 0
    assert cli("call", ".", "greet", "--data", '"Ada"', cwd=hello).stderr == ""


def test_run_and_list_warn_of_a_plugin_older_than_its_sources(hello: Path) -> None:
    """`wasmext run t.json --plugins ..` from inside the plugin, after an edit without a
    build, played the session with the old module and said nothing."""
    assert cli("build", cwd=hello).returncode == 0
    transcript = hello.parent / "t.json"
    transcript.write_text('{"turns": [{"user": "hi", "steps": [{"response": "hello"}]}]}')
    run = ("run", str(transcript), "--plugins", "..")
    assert "older than" not in cli(*run, cwd=hello).stdout
    source = hello / "hello.c"
    source.write_text(source.read_text() + "\n/* an edit */\n")
    warning = ("warning: plugin hello: hello.wasm is older than its sources (the folder's or "
               "its SDK's); this is the module built before (run: wasmext build ../hello)")
    played = cli(*run, cwd=hello)
    assert played.returncode == 0 and f"  {warning}\n" in played.stdout, played.stdout
    listed = cli("list", "--plugins", "..", cwd=hello)
    assert warning in listed.stdout + listed.stderr, listed.stdout + listed.stderr
