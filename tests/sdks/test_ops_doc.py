"""The authors' guide's table of op wrappers names only what each SDK defines."""

from __future__ import annotations

import re

from support import ROOT

GUIDE = ROOT / "docs" / "getting-started-authors.md"
SDK = ROOT / "guest-sdks"
# (sources, a definition of NAME) per column of the table.
DEFINED = {
    "C": ("c/include/*.h", r"\b{n}\s*\(|\(\*{n}\)|#define {n}\b"),
    "Zig": ("zig/src/*.zig", r"pub (?:const|fn) {n}\b|@hasDecl\(P, \"{n}\"\)"),
    "Rust": ("rust/src/*.rs", r"pub fn {n}\b|fn {n}\("),
    "Go": ("go/*.go", r"func (?:\([^)]*\) )?{n}\(|^\t{n}\("),
    "AssemblyScript": ("assemblyscript/assembly/*.ts", r"export function {n}\b|^  {n}\("),
    "Python": ("python/wasmext_guest/*.py", r"def {n}\("),
    "JavaScript": ("javascript/src/*.js", r"export function {n}\b|^  {n}\("),
}


def table() -> tuple[list[str], list[list[str]]]:
    text = GUIDE.read_text(encoding="utf-8").split("<!-- ops-table:")[1]
    rows = [line for line in text.splitlines()[1:] if line.startswith("|")]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    return cells[0], [r for r in cells[2:]]


def test_every_op_row_names_a_wrapper_each_sdk_defines() -> None:
    header, rows = table()
    assert header[1:] == list(DEFINED)
    assert len(rows) >= 7
    for row in rows:
        for lang, cell in zip(header[1:], row[1:], strict=True):
            names = [n for n in re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cell)]
            assert names, (row[0], lang)
            pattern, definition = DEFINED[lang]
            source = "\n".join(p.read_text(encoding="utf-8") for p in SDK.glob(pattern))
            for name in names:
                assert re.search(definition.format(n=re.escape(name)), source, re.M), \
                    f"{lang}: {name} ({row[0]}) is not defined in guest-sdks/{pattern}"


def test_the_table_knows_when_a_name_is_missing() -> None:
    pattern, definition = DEFINED["C"]
    source = "\n".join(p.read_text(encoding="utf-8") for p in SDK.glob(pattern))
    assert not re.search(definition.format(n="wasmext_state_teleport"), source, re.M)
    assert re.search(definition.format(n="wasmext_state_get"), source, re.M)


def test_the_exported_surface_has_the_wrappers() -> None:
    init = (SDK / "python" / "wasmext_guest" / "__init__.py").read_text()
    index = (SDK / "javascript" / "src" / "index.js").read_text()
    as_index = (SDK / "assemblyscript" / "assembly" / "index.ts").read_text()
    lib = (SDK / "rust" / "src" / "lib.rs").read_text()
    zig = (SDK / "zig" / "src" / "wasmext.zig").read_text()
    for name in ("state_get", "state_set", "emit", "http_fetch", "config"):
        assert f'"{name}"' in init
    for name in ("stateGet", "stateSet", "emit", "httpFetch", "config"):
        assert re.search(rf"\b{name}\b", index)
    for name in ("stateGet", "stateSetString", "emitString", "httpFetch", "configGet"):
        assert re.search(rf"\b{name}\b", as_index)
    for name in ("state_get", "state_set", "emit", "http_fetch", "Scope"):
        assert re.search(rf"\b{name}\b", lib)
    for name in ("stateGet", "stateSet", "emit", "httpFetch", "Scope"):
        assert f"pub const {name} =" in zig
