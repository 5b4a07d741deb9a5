"""Errors that show the author's error: a component build's first error as the author's
file and line, and a plugin's panic message in `wasmext call`'s one error line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wasmext.errors import DESCRIBE_CAP
from wasmext.testing import DATA_AT, guest_wat
from wasmext_cli.build.errors import first_error, javascript_error, python_error

ROOT = Path(__file__).resolve().parents[2]
SDKS = ROOT / "guest-sdks"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli")])}
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def example(lang: str, dest: Path) -> Path:
    folder = dest / lang
    shutil.copytree(SDKS / lang / "examples" / "hello", folder,
                    ignore=shutil.ignore_patterns("*.wasm", "*.stamp"))
    return folder


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer has {old!r}"
    path.write_text(text.replace(old, new, 1))


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and lines, proc.stderr
    assert not any(ln.startswith("wasmext:") for ln in lines[:-1]), proc.stderr
    return lines[-1]


# What componentize-py printed for a real syntax error, RUST_BACKTRACE=1 (frames cut).
PY_SYNTAX = '''Traceback (most recent call last):
  File "/venv/bin/componentize-py", line 6, in <module>
    sys.exit(script())
             ^^^^^^^^
AssertionError:   File "/0/app.py", line 14
    x = = 1
        ^
SyntaxError: invalid syntax


Caused by:
    SyntaxError: invalid syntax (app.py, line 14)

Stack backtrace:
   0: <anyhow::Error>::msg::<alloc::string::String>
   1: anyhow::__private::format_err
  10: cfunction_vectorcall_NOARGS
             at /tmp/python-build/Python-3.11.7/Objects/methodobject.c:486:24
'''
PY_RUNTIME = '''AssertionError: Traceback (most recent call last):
  File "/0/app.py", line 5, in <module>
    nope = helper()
  File "/0/util.py", line 2, in helper
    return json.loads("{")
  File "/1/wasmext_guest/codec.py", line 9, in loads
    raise ValueError("no")
ValueError: Expecting property name


Caused by:
    ValueError: Expecting property name
'''
JS_PARSE = "hello.js:10:17: SyntaxError: Unexpected token\n"
JS_INIT = """Error: Failed to initialize component (wizer (/x/wizer)):
Exception while evaluating top-level script
source.js:444:14 ReferenceError: undefinedName is not defined
Stack:
  @source.js:444:14
"""


@pytest.mark.parametrize(("output", "lang", "expected"), [
    (PY_SYNTAX, "python", "app.py:14: SyntaxError: invalid syntax"),
    # the innermost frame of the plugin's own folder (/0), not the SDK's (/1)
    (PY_RUNTIME, "python", "util.py:2: ValueError: Expecting property name"),
    ("Caused by:\n    SyntaxError: bad (app.py, line 3)\n", "python",
     "app.py:3: SyntaxError: bad (app.py, line 3)"),
    (JS_PARSE, "javascript", "hello.js:10:17: SyntaxError: Unexpected token"),
    (JS_INIT, "javascript", "source.js:444:14: ReferenceError: undefinedName is not defined"),
    # a Rust backtrace is never the first error
    ("error: no world\n\nStack backtrace:\n   0: anyhow::error\n", "python", "error: no world"),
])
def test_component_builders_first_error(output: str, lang: str, expected: str) -> None:
    assert first_error(output, lang) == expected


NAME = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)
EXCEPTION = st.sampled_from(["SyntaxError", "NameError", "TypeError", "ModuleNotFoundError",
                             "IndentationError", "json.decoder.JSONDecodeError"])
MESSAGE = st.from_regex(r"[A-Za-z0-9 '(),.`_-]{1,80}", fullmatch=True).map(str.strip).filter(
    lambda m: bool(m) and 'File "' not in m and not m.startswith("Traceback ("))
NOISE = st.lists(st.from_regex(r"[ -~]{0,60}", fullmatch=True).filter(
    lambda ln: "Error" not in ln and "Exception" not in ln and "Exit" not in ln
    and "Interrupt" not in ln and "Warning" not in ln and 'File "' not in ln
    and "backtrace" not in ln.lower()), max_size=5)


@given(NAME, st.integers(1, 99999), EXCEPTION, MESSAGE, NOISE, st.booleans(),
       st.lists(st.tuples(st.integers(1, 9), NAME, st.integers(1, 999)), max_size=3))
def test_python_error_names_the_plugins_file_line_and_exception(
        module: str, line: int, exception: str, message: str, noise: list[str],
        backtrace: bool, sdk_frames: list[tuple[int, str, int]]) -> None:
    frames = [f'  File "/0/{module}.py", line {line}, in <module>', "    code()"]
    frames += [f'  File "/{mount}/{name}.py", line {at}, in f' for mount, name, at in sdk_frames]
    output = "\n".join([*noise, "AssertionError: Traceback (most recent call last):", *frames,
                        f"{exception}: {message}", "", "Caused by:", f"    {exception}: {message}"])
    if backtrace:
        output += "\n\nStack backtrace:\n   0: <anyhow::Error>::msg\n   1: error: not this\n"
    assert python_error(output) == f"{module}.py:{line}: {exception}: {message}"


@given(NAME, st.integers(1, 99999), st.integers(1, 999), st.sampled_from(
    ["SyntaxError", "ReferenceError", "TypeError", "RangeError"]), MESSAGE, NOISE)
def test_javascript_error_names_the_file_line_and_column(
        module: str, line: int, col: int, exception: str, message: str,
        noise: list[str]) -> None:
    output = "\n".join([*noise, f"{module}.js:{line}:{col}: {exception}: {message}",
                        "    at main (file:///sdk/componentize.mjs:18:25)"])
    assert javascript_error(output) == f"{module}.js:{line}:{col}: {exception}: {message}"


@given(st.text(max_size=2000), st.sampled_from(["python", "javascript", "c", None]))
def test_every_reading_is_one_bounded_inert_line(output: str, lang: str | None) -> None:
    line = first_error(output, lang)
    assert line and "\n" not in line and "\r" not in line and "\x1b" not in line
    assert len(line) <= 300


def _componentize_js() -> None:
    if shutil.which("node") is None or not (
            SDKS / "javascript" / "node_modules" / "@bytecodealliance" / "componentize-js"
    ).is_dir():
        pytest.skip("componentize-js is not installed (guest-sdks/javascript/setup-toolchain.sh)")


def test_a_javascript_syntax_error_names_the_plugins_file_line_and_column(
        tmp_path: Path) -> None:
    _componentize_js()
    folder = example("javascript", tmp_path)
    edit(folder / "hello.js", "      return `${config", "      const x = ;\n      return `${config")
    line_no = next(i for i, ln in enumerate((folder / "hello.js").read_text().splitlines(), 1)
                   if "const x = ;" in ln)
    err = error_line(cli("build", cwd=folder))
    assert err == (f"wasmext: plugin hello: building hello.js failed: "
                   f"hello.js:{line_no}:17: SyntaxError: Unexpected token")


@pytest.mark.slow  # componentize-js runs the bundle to its failure: ~11 s of a core
def test_a_javascript_error_at_start_up_names_the_plugins_line_not_the_bundles(
        tmp_path: Path) -> None:
    _componentize_js()
    folder = example("javascript", tmp_path)
    edit(folder / "hello.js", "\nclass Hello", "\nconst nope = undefinedName + 1;\nclass Hello")
    line_no = next(i for i, ln in enumerate((folder / "hello.js").read_text().splitlines(), 1)
                   if "undefinedName" in ln)
    err = error_line(cli("build", cwd=folder))
    assert err == (f"wasmext: plugin hello: building hello.js failed: "
                   f"hello.js:{line_no}:14: ReferenceError: undefinedName is not defined")


@pytest.mark.slow
def test_a_python_syntax_error_is_one_line_even_with_a_rust_backtrace(tmp_path: Path) -> None:
    if shutil.which("componentize-py", path=str(Path(sys.executable).parent)) is None \
            and shutil.which("componentize-py") is None:
        pytest.skip("componentize-py is not installed (pip install 'wasmext[build]')")
    folder = example("python", tmp_path)
    edit(folder / "app.py", "        return f", "        x = = 1\n        return f")
    line_no = next(i for i, ln in enumerate((folder / "app.py").read_text().splitlines(), 1)
                   if "x = = 1" in ln)
    proc = cli("build", cwd=folder, env={"RUST_BACKTRACE": "1"})
    err = error_line(proc)
    assert err == (f"wasmext: plugin hello: building app.py failed: "
                   f"app.py:{line_no}: SyntaxError: invalid syntax")
    assert "Traceback" not in err and "anyhow" not in err


@pytest.mark.slow
def test_a_python_error_at_import_names_the_plugins_line(tmp_path: Path) -> None:
    if shutil.which("componentize-py", path=str(Path(sys.executable).parent)) is None \
            and shutil.which("componentize-py") is None:
        pytest.skip("componentize-py is not installed (pip install 'wasmext[build]')")
    folder = example("python", tmp_path)
    edit(folder / "app.py", "\n\nclass Hello", "\nnope = undefined_name + 1\n\nclass Hello")
    line_no = next(i for i, ln in enumerate((folder / "app.py").read_text().splitlines(), 1)
                   if "undefined_name" in ln)
    err = error_line(cli("build", cwd=folder, env={"RUST_BACKTRACE": "0"}))
    assert err == (f"wasmext: plugin hello: building app.py failed: "
                   f"app.py:{line_no}: NameError: name 'undefined_name' is not defined")


PANICS = {
    # language: (file, the line to find, the line that panics when the name has 3 letters)
    "c": ("hello.c", "    const char *greeting = \"Hello\";",
          "    if (name_len == 3) {\n        fputs(\"greet exploded\\n\", stderr);\n"
          "        abort();\n    }\n"),
    "zig": ("hello.zig", "        const answer = ",
            "        if (who.len == 3) @panic(\"greet exploded\");\n"),
    "rust": ("hello.rs", "        let setting = ",
             "        if name.len() == 3 {\n            panic!(\"greet exploded\");\n        }\n"),
    "assemblyscript": ("hello.ts", "  let greeting = ",
                       "  if (name!.length == 3) throw new Error(\"greet exploded\");\n"),
    "go": ("hello.go", "\tgreeting := ",
           "\tif len(who) == 3 {\n\t\tpanic(\"greet exploded\")\n\t}\n"),
}


@pytest.mark.slow
def test_a_plugins_panic_is_in_the_one_error_line_without_log(tmp_path: Path) -> None:
    folders = []
    for lang, (source, anchor, panic) in PANICS.items():
        folder = example(lang, tmp_path)
        edit(folder / source, anchor, panic + anchor)
        if lang == "c":
            edit(folder / source, "#include <wasmext.h>",
                 "#include <stdio.h>\n#include <stdlib.h>\n#include <wasmext.h>")
        folders.append(folder)
    build = cli("build", "--jobs", "2", *map(str, folders), cwd=tmp_path)
    if build.returncode != 0 and "install it with" in build.stderr:
        pytest.skip(f"a toolchain is missing: {build.stderr.strip().splitlines()[-1]}")
    assert build.returncode == 0, build.stderr
    for folder in folders:
        proc = cli("call", str(folder), "greet", "--data", '"Ada"', cwd=tmp_path)
        err = error_line(proc)
        assert err.startswith("wasmext: plugin hello hook greet: "), (folder.name, err)
        assert "greet exploded" in err, (folder.name, err)
        assert proc.stdout == ""
        fine = cli("call", str(folder), "greet", "--data", '"Grace"', cwd=tmp_path)
        assert fine.returncode == 0 and fine.stdout.strip() == '"Hello, Grace!"', fine.stderr


LOG = '(import "wasmext" "log" (func $log (param i32 i32 i32)))'


def test_last_words_are_one_bounded_inert_line(tmp_path: Path) -> None:
    import wasmtime

    words = b"panic: \x1b[31mred\x1b[0m\r\nwasmext: forged line " + b"A" * 5000
    body = (f"(call $log (i32.const 4) (i32.const {DATA_AT}) (i32.const {len(words)})) "
            "unreachable")
    dying, fine = tmp_path / "dying.wasm", tmp_path / "fine.wasm"
    dying.write_bytes(bytes(wasmtime.wat2wasm(guest_wat(body, imports=LOG, data=words))))
    fine.write_bytes(bytes(wasmtime.wat2wasm(guest_wat(response={"ok": True,
                                                                 "value": "alive"}))))
    proc = cli("call", str(dying), "test", cwd=tmp_path)
    err = error_line(proc)
    assert len(proc.stderr.strip().splitlines()) == 1
    assert err.startswith("wasmext: plugin dying hook test: trap: panic: ")
    assert "\x1b" not in err and "\r" not in err and len(err) <= DESCRIBE_CAP + 16
    healthy = cli("call", str(fine), "test", cwd=tmp_path)
    assert healthy.returncode == 0 and healthy.stdout.strip() == '"alive"'
