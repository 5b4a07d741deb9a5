"""A compiler's output reduced to the one line a build error shows.

Compilers print pages; an author needs the first error and where it is. The
line is `FILE:LINE:COL: message` when a location can be found near the first
error (gcc/clang/zig/go put it on the error line, rustc on a following
` --> file:line:col` line, asc as `in file(line,col)`), else the first line
that reads like an error, else the first non-empty line.
"""

from __future__ import annotations

import re

from wasmext.text import clean

__all__ = ["first_error"]

ERROR = re.compile(r"\berror\b|\bERROR\b|undefined:|cannot |panic:", re.IGNORECASE)
# file:line[:col] with a source-like name (not a URL, not "error[E0425]:").
AT = re.compile(r"(?<![\w/.-])((?:\.{0,2}/)?[\w./-]+\.[A-Za-z]{1,4}):(\d+)(?::(\d+))?")
ASC_AT = re.compile(r"\bin ([\w./-]+\.ts)\((\d+),(\d+)\)")
LOOKAHEAD = 8
LIMIT = 300


def _location(line: str) -> str | None:
    match = AT.search(line)
    if match:
        col = f":{match.group(3)}" if match.group(3) else ""
        return f"{match.group(1)}:{match.group(2)}{col}"
    match = ASC_AT.search(line)
    if match:
        return f"{match.group(1)}:{match.group(2)}:{match.group(3)}"
    return None


def first_error(output: str) -> str:
    """The first error of `output` as one clean line, with its file:line when known."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
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
