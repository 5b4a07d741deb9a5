"""A compiler's output reduced to the one line a build error shows.

Compilers print pages; an author needs the first error and where it is. The
line is `FILE:LINE:COL: message` when a location can be found near the first
error (gcc/clang/zig/go put it on the error line, rustc on a following
` --> file:line:col` line, asc as `in file(line,col)`), else the first line
that reads like an error, else the first non-empty line.

Two builders wrap an interpreter and need their own reading:
- componentize-py runs the plugin's modules in CPython and reports the Python
  exception inside a Rust `anyhow` error (and, with RUST_BACKTRACE set, a
  page of Rust frames): the line is `app.py:52: SyntaxError: invalid syntax`,
  the innermost frame of the plugin's own folder (componentize-py mounts the
  first module path as /0) and the exception, never the Rust or Python frames
  of componentize-py itself.
- componentize-js: the SDK's componentize.mjs prints `hello.js:10:17:
  SyntaxError: ...` itself (it knows how the SDK bundle shifts lines); an older
  output with a `source.js:L:C ReferenceError` line is read as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from wasmext.text import clean

__all__ = ["first_error", "javascript_error", "python_error"]

ERROR = re.compile(r"\berror\b|\bERROR\b|undefined:|cannot |panic:", re.IGNORECASE)
# file:line[:col] with a source-like name (not a URL, not "error[E0425]:").
AT = re.compile(r"(?<![\w/.-])((?:\.{0,2}/)?[\w./-]+\.[A-Za-z]{1,4}):(\d+)(?::(\d+))?")
ASC_AT = re.compile(r"\bin ([\w./-]+\.ts)\((\d+),(\d+)\)")
LOOKAHEAD = 8
LIMIT = 300
# Where a Rust program's anyhow backtrace starts: nothing below it is the author's.
BACKTRACE = re.compile(r"^\s*(?:Stack backtrace:|stack backtrace:)\s*$", re.MULTILINE)

# A Python exception line: `NameError: name 'x' is not defined`, `a.b.JSONDecodeError: ...`.
PY_EXCEPTION = re.compile(
    r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)): ?(.*)$")
PY_FRAME = re.compile(r'File "([^"\n]+)", line (\d+)')
PY_PAREN = re.compile(r"\(([^()\n]+\.py), line (\d+)\)")
# componentize-py mounts its module paths as /0, /1, ...; /0 is the plugin's folder.
PY_MOUNT = re.compile(r"^/(\d+)/")
# A JavaScript error with its place: `hello.js:10:17: SyntaxError: ...` (the SDK's
# componentize.mjs) or `source.js:444:14 ReferenceError: ...` (componentize-js).
JS_LOCATED = re.compile(
    r"^\s*@?([\w./-]+\.m?js):(\d+):(\d+):? ((?:[A-Z]\w*)?Error\b:?.*)$")
JS_EXCEPTION = re.compile(r"^\s*(?:Uncaught )?([A-Z]\w*Error): (.+)$")


def _location(line: str) -> str | None:
    match = AT.search(line)
    if match:
        col = f":{match.group(3)}" if match.group(3) else ""
        return f"{match.group(1)}:{match.group(2)}{col}"
    match = ASC_AT.search(line)
    if match:
        return f"{match.group(1)}:{match.group(2)}:{match.group(3)}"
    return None


def _without_backtrace(output: str) -> str:
    match = BACKTRACE.search(output)
    return output[:match.start()] if match else output


def generic_error(output: str) -> str:
    """The first error line of any compiler, located when a location is near."""
    lines = [ln.strip() for ln in _without_backtrace(output).splitlines() if ln.strip()]
    if not lines:
        return "(the compiler printed nothing)"
    index = next((i for i, ln in enumerate(lines) if ERROR.search(ln)), None)
    if index is None:
        index = next((i for i, ln in enumerate(lines) if _location(ln)), 0)
    line = lines[index]
    if _location(line) is None:
        for follow in lines[index + 1:index + 1 + LOOKAHEAD]:
            where = _location(follow)
            if where is not None:
                line = f"{where}: {line}"
                break
    return clean(line, LIMIT)


def _py_path(path: str) -> tuple[str, bool]:
    """A frame's file as the author knows it, and whether it is in the plugin's folder."""
    match = PY_MOUNT.match(path)
    if match is None:
        return path, False
    return path[match.end():], match.group(1) == "0"


def python_error(output: str) -> str | None:
    """`app.py:52: SyntaxError: invalid syntax` from componentize-py's output, or None."""
    lines = _without_backtrace(output).splitlines()
    for index, line in enumerate(lines):
        match = PY_EXCEPTION.match(line)
        if match is None:
            continue
        name, message = match.group(1), match.group(2).strip()
        if 'File "' in message or message.startswith("Traceback ("):
            continue  # componentize-py's wrapper around the real traceback
        frames = [(*_py_path(m.group(1)), m.group(2))
                  for ln in lines[:index + 1] for m in PY_FRAME.finditer(ln)]
        own = [f for f in frames if f[1]] or frames
        if own:
            path, _, line_no = own[-1]
            return clean(f"{path}:{line_no}: {name}: {message}", LIMIT)
        paren = PY_PAREN.search(message)
        if paren:
            path = _py_path(paren.group(1))[0]
            return clean(f"{path}:{paren.group(2)}: {name}: {message}", LIMIT)
        return clean(f"{name}: {message}", LIMIT)
    return None


def javascript_error(output: str) -> str | None:
    """`hello.js:10:17: SyntaxError: Unexpected token` from a componentize-js build, or None."""
    lines = _without_backtrace(output).splitlines()
    for line in lines:
        match = JS_LOCATED.match(line)
        if match:
            file, row, col, message = match.groups()
            return clean(f"{file}:{row}:{col}: {message.strip()}", LIMIT)
    for line in lines:
        match = JS_EXCEPTION.match(line)
        if match:
            return clean(f"{match.group(1)}: {match.group(2).strip()}", LIMIT)
    return None


PARSERS: dict[str, Callable[[str], str | None]] = {
    "python": python_error,
    "javascript": javascript_error,
}


def first_error(output: str, lang: str | None = None) -> str:
    """The first error of `output` as one clean line, with its file:line when known.

    `lang` picks the builder's own reading first (see the module docstring)."""
    parser = PARSERS.get(lang or "")
    found = parser(output) if parser is not None else None
    return found if found is not None else generic_error(output)
