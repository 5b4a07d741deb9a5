"""The C guest SDK's native unit tests.

guest-sdks/c/tests/test_msgpack.c is compiled for this machine with the zig
toolchain (with UBSan, so undefined behaviour on hostile input fails the run)
and fed a cases file written here from abi/vectors/*.json: the vectors stay the
single source of truth and the C side needs no JSON parser.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from support import msgpack_case_rows

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "guest-sdks" / "c"
VECTORS = ROOT / "abi" / "vectors"

pytestmark = [
    pytest.mark.toolchain,
    pytest.mark.skipif(importlib.util.find_spec("ziglang") is None,
                       reason="the ziglang toolchain is not installed "
                              "(pip install 'wasmext[build]'); the C SDK tests compile C"),
]




def write_cases(path: Path) -> int:
    """The cases file test_msgpack.c reads: KIND, NAME, HEX[, ARG], tab-separated."""
    rows = msgpack_case_rows()
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


@pytest.fixture(scope="module")
def test_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("c-sdk") / "test_msgpack"
    cmd = [sys.executable, "-m", "ziglang", "cc", "-std=c11", "-Wall", "-Wextra", "-Werror",
           "-O1", "-g", "-fsanitize=undefined", "-fno-sanitize-recover=all",
           "-I", str(SDK / "include"),
           str(SDK / "src" / "msgpack_read.c"), str(SDK / "src" / "msgpack_write.c"),
           str(SDK / "tests" / "test_msgpack.c"), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"compiling the C SDK tests failed:\n{proc.stderr}"
    return out


def test_msgpack_reader_and_writer(test_binary: Path, tmp_path: Path) -> None:
    cases = tmp_path / "cases.tsv"
    count = write_cases(cases)
    proc = subprocess.run([str(test_binary), str(cases)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.startswith(f"{count} file cases"), proc.stdout


def test_cases_file_covers_every_vector(tmp_path: Path) -> None:
    """A vector added to abi/vectors must reach the C tests without editing them."""
    cases = tmp_path / "cases.tsv"
    write_cases(cases)
    kinds = [line.split("\t", 1)[0] for line in cases.read_text(encoding="utf-8").splitlines()]
    vectors = json.loads((VECTORS / "msgpack.json").read_text(encoding="utf-8"))
    hostile = json.loads((VECTORS / "hostile.json").read_text(encoding="utf-8"))
    assert kinds.count("C") == len(vectors["canonical"])
    assert kinds.count("D") == len(vectors["decode_only"])
    assert kinds.count("H") == len(hostile["hostile"])


def test_missing_cases_file_is_an_error(test_binary: Path, tmp_path: Path) -> None:
    proc = subprocess.run([str(test_binary), str(tmp_path / "absent.tsv")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert "cannot open" in proc.stderr
