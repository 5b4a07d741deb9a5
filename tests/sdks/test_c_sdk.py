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

import msgpack
import pytest

from wasmext.testing import vector_value

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "guest-sdks" / "c"
VECTORS = ROOT / "abi" / "vectors"

pytestmark = [
    pytest.mark.toolchain,
    pytest.mark.skipif(importlib.util.find_spec("ziglang") is None,
                       reason="the ziglang toolchain is not installed "
                              "(pip install 'wasmext[build]'); the C SDK tests compile C"),
]

# Integers on both sides of every encoding boundary.
BOUNDARY_INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
                 2**64 - 1, -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1,
                 -(2**63)]
STR_LENGTHS = [0, 31, 32, 255, 256, 65535, 65536]
BIN_LENGTHS = [0, 1, 255, 256, 65535, 65536]
CONTAINER_LENGTHS = [0, 15, 16, 65535, 65536]


def _header(encoded: bytes, payload_len: int) -> str:
    return encoded[:len(encoded) - payload_len].hex()


def write_cases(path: Path) -> int:
    """The cases file test_msgpack.c reads: KIND, NAME, HEX[, ARG], tab-separated."""
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
