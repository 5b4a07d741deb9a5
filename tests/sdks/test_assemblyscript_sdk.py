"""The AssemblyScript guest SDK: its unit tests, and its plugins end to end.

guest-sdks/assemblyscript/tests/harness.ts is compiled with the production
build (wasmext_cli.build.assemblyscript, so the same flags as every plugin)
and driven here through wasmtime with a fake host: the MessagePack reader and
writer against abi/vectors/*.json (canonical, decode_only, hostile, every
truncation, huge declared lengths, depth 64/65, integer and length
boundaries, random input), the host-service wrappers against well-formed and
broken answers, the replacements of abort/trace/seed, and dispatch of every
kind of reply. The plugins are then run through the real host.

Everything that compiles skips, with the install command as the reason, when
the toolchain (node and the SDK's npm packages) is missing.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import pytest
import wasmtime
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support import built_module
from wasmext import GuestTrap, PluginError, Runtime
from wasmext._abi import ABI_MINOR
from wasmext._toml import tomllib
from wasmext.testing import vector_value

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "guest-sdks" / "assemblyscript"
HARNESS = SDK / "tests"
HELLO = SDK / "examples" / "hello"
CONFORMANCE = SDK / "conformance"
VECTORS = ROOT / "abi" / "vectors"
CANONICAL = json.loads((VECTORS / "msgpack.json").read_text(encoding="utf-8"))["canonical"]
DECODE_ONLY = json.loads((VECTORS / "msgpack.json").read_text(encoding="utf-8"))["decode_only"]
HOSTILE = json.loads((VECTORS / "hostile.json").read_text(encoding="utf-8"))["hostile"]

# MsgpackError in assembly/msgpack.ts
OK, TRUNCATED, TYPE, RANGE, DEPTH, MALFORMED = 0, -1, -2, -3, -4, -5
# Type in assembly/msgpack.ts
T_NIL, T_BOOL, T_INT, T_UINT, T_FLOAT, T_STR, T_BIN, T_ARRAY, T_MAP, T_INVALID = range(10)

BOUNDARY_INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
                 2**64 - 1, -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1,
                 -(2**63)]
LENGTHS = [0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536, 2**32 - 1]
FIXTURE_OK = [HealthCheck.function_scoped_fixture]  # the guest is reset by nothing we test


def pack(value: Any) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True)
    return data


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def toolchain_missing() -> str | None:
    from wasmext_cli.build import ToolchainMissing
    from wasmext_cli.build.assemblyscript import sdk_dir, toolchain

    try:
        toolchain(sdk_dir())
    except ToolchainMissing as exc:
        return str(exc)
    return None


def compiled(folder: Path) -> Path:
    """Build a plugin folder in place with the production build, once per test run (the
    cross-SDK tests build the same hello and conformance plugin); skip without the
    toolchain."""
    reason = toolchain_missing()
    if reason is not None:
        pytest.skip(reason)
    return built_module(folder)


# ---- the fake host ----------------------------------------------------------------

Answerer = Callable[[bytes], "bytes | int | tuple[int, int]"]


@dataclass
class Guest:
    """The harness module in wasmtime, with a scriptable wasmext.host_call."""

    store: wasmtime.Store
    instance: wasmtime.Instance
    memory: wasmtime.Memory
    logs: list[tuple[int, str]] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)
    answer: Answerer | None = None

    def fn(self, name: str) -> Any:
        export = self.instance.exports(self.store)[name]
        assert isinstance(export, wasmtime.Func), name
        return export

    def call(self, name: str, *args: Any) -> Any:
        return self.fn(name)(self.store, *args)

    def put(self, data: bytes) -> tuple[int, int]:
        ptr = self.call("wasmext_alloc", len(data))
        assert ptr != 0
        self.memory.write(self.store, data, ptr)
        return ptr, len(data)

    def read(self, ptr: int, length: int) -> bytes:
        return bytes(self.memory.read(self.store, ptr, ptr + length))

    def result(self, packed: int) -> bytes:
        assert packed >= 0, f"error {packed}"
        return self.read(packed >> 32, packed & 0xFFFFFFFF)

    def with_bytes(self, name: str, data: bytes, *extra: Any) -> Any:
        ptr, n = self.put(data)
        try:
            return self.call(name, ptr, n, *extra)
        finally:
            self.call("wasmext_free", ptr, n)

    def bytes_result(self, name: str, data: bytes) -> bytes | int:
        """The result bytes, or the (negative) error code."""
        packed = self.with_bytes(name, data)
        return packed if packed < 0 else self.result(packed)

    def export_call(self, request: Any) -> Any:
        ptr, n = self.put(pack(request))
        out = self.call("wasmext_call", ptr, n)
        self.call("wasmext_free", ptr, n)
        return unpack(self.result(out))

    def fuel_used(self, fn: Callable[[], Any]) -> int:
        self.store.set_fuel(10**9)
        fn()
        return 10**9 - self.store.get_fuel()


def make_guest(module: wasmtime.Module, engine: wasmtime.Engine) -> Guest:
    store = wasmtime.Store(engine)
    store.set_fuel(10**9)
    linker = wasmtime.Linker(engine)
    holder: dict[str, Guest] = {}

    def mem(caller: wasmtime.Caller) -> wasmtime.Memory:
        m = caller["memory"]
        assert isinstance(m, wasmtime.Memory)
        return m

    def log(caller: wasmtime.Caller, level: int, ptr: int, length: int) -> None:
        text = bytes(mem(caller).read(caller, ptr, ptr + length)).decode("utf-8")
        holder["g"].logs.append((level, text))

    def host_call(caller: wasmtime.Caller, ptr: int, length: int) -> int:
        guest = holder["g"]
        request = bytes(mem(caller).read(caller, ptr, ptr + length))
        guest.requests.append(unpack(request))
        answer = guest.answer(request) if guest.answer else pack({"ok": True, "value": None})
        if isinstance(answer, int):  # a packed value as it is
            return answer
        if isinstance(answer, tuple):  # (ptr, len) as it is
            return (answer[0] << 32) | answer[1]
        alloc = caller["wasmext_alloc"]
        assert isinstance(alloc, wasmtime.Func)
        out = alloc(caller, len(answer))
        mem(caller).write(caller, answer, out)
        return (out << 32) | len(answer)

    def random_get(caller: wasmtime.Caller, ptr: int, length: int) -> int:
        mem(caller).write(caller, bytes(range(length)), ptr)
        return 0

    clock = iter(range(0, 10**12, 1_500_000))

    def clock_time_get(caller: wasmtime.Caller, clock_id: int, precision: int, at: int) -> int:
        mem(caller).write(caller, next(clock).to_bytes(8, "little"), at)
        return 0

    i32, i64 = wasmtime.ValType.i32(), wasmtime.ValType.i64()
    linker.define_func("wasmext", "log", wasmtime.FuncType([i32, i32, i32], []), log,
                       access_caller=True)
    linker.define_func("wasmext", "host_call", wasmtime.FuncType([i32, i32], [i64]), host_call,
                       access_caller=True)
    linker.define_func("wasi_snapshot_preview1", "random_get",
                       wasmtime.FuncType([i32, i32], [i32]), random_get, access_caller=True)
    linker.define_func("wasi_snapshot_preview1", "clock_time_get",
                       wasmtime.FuncType([i32, i64, i32], [i32]), clock_time_get,
                       access_caller=True)
    instance = linker.instantiate(store, module)
    memory = instance.exports(store)["memory"]
    assert isinstance(memory, wasmtime.Memory)
    guest = Guest(store, instance, memory)
    holder["g"] = guest
    guest.call("_initialize")
    return guest


@pytest.fixture(scope="module")
def harness_module() -> tuple[wasmtime.Module, wasmtime.Engine, Path]:
    wasm = compiled(HARNESS)
    config = wasmtime.Config()
    config.consume_fuel = True
    engine = wasmtime.Engine(config)
    return wasmtime.Module.from_file(engine, str(wasm)), engine, wasm


@pytest.fixture
def guest(harness_module: tuple[wasmtime.Module, wasmtime.Engine, Path]) -> Guest:
    module, engine, _ = harness_module
    g = make_guest(module, engine)
    reg = g.with_bytes("wasmext_register", pack({
        "abi": {"major": 1, "minor": 0}, "host": {"name": "fake", "version": "0"},
        "plugin": {"id": "harness-id"}, "settings": {}}))
    assert unpack(g.result(reg))["name"] == "harness"
    return g


# ---- constants (no toolchain needed) -------------------------------------------------

def test_constants_match_abi_toml() -> None:
    table = tomllib.loads((ROOT / "abi" / "abi.toml").read_text(encoding="utf-8"))
    source = (SDK / "assembly" / "abi.ts").read_text(encoding="utf-8")

    def block(name: str) -> str:
        found = re.search(r"export (?:namespace|enum) " + name + r" \{(.*?)\n\}", source, re.S)
        assert found, name
        return found.group(1)

    def strings(name: str) -> dict[str, str]:
        return dict(re.findall(r'export const (\w+) = "([^"]*)";', block(name)))

    assert re.search(r"ABI_MAJOR: i32 = (\d+);", source).group(1) == str(  # type: ignore[union-attr]
        table["version"]["major"])
    assert re.search(r"ABI_MINOR: i32 = (\d+);", source).group(1) == str(  # type: ignore[union-attr]
        table["version"]["minor"])
    levels = {k.lower(): int(v) for k, v in re.findall(r"(\w+) = (\d+),", block("LogLevel"))}
    assert levels == table["log_levels"]
    codes = strings("ErrorCode")
    assert codes == {c["code"].upper(): c["code"] for c in table["error_codes"]}
    ops = strings("Op")
    assert ops == {o["op"].upper().replace(".", "_"): o["op"] for o in table["ops"]}
    exports = set(strings("ExportName").values())
    assert exports == {e["name"] for e in table["exports"]}
    imports = strings("ImportName")
    assert {(imports["MODULE"], i["name"]) for i in table["imports"]} == {
        (i["module"], i["name"]) for i in table["imports"]}
    assert set(imports.values()) - {imports["MODULE"]} == {i["name"] for i in table["imports"]}
    limits = {k.lower(): int(v.replace("_", "")) for k, v in
              re.findall(r"export const (\w+): i\d+ = ([\d_]+);", block("Limits"))}
    assert limits == table["limits"]


def test_package_pins_the_compiler() -> None:
    package = json.loads((SDK / "package.json").read_text(encoding="utf-8"))
    lock = json.loads((SDK / "package-lock.json").read_text(encoding="utf-8"))
    pinned = package["devDependencies"]["assemblyscript"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", pinned), "pin an exact version"
    assert lock["packages"]["node_modules/assemblyscript"]["version"] == pinned
    assert lock["packages"]["node_modules/@wasmext/as-sdk"]["link"] is True
    assert "node_modules/" in (SDK / ".gitignore").read_text(encoding="utf-8")


def test_missing_toolchain_names_the_install_command(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from wasmext.manifest import BuildSpec
    from wasmext_cli.build import ToolchainMissing
    from wasmext_cli.build.assemblyscript import commands

    monkeypatch.setenv("WASMEXT_SDK_DIR", str(tmp_path))
    (tmp_path / "assemblyscript").mkdir()
    with pytest.raises(ToolchainMissing) as info:
        commands(BuildSpec("assemblyscript", ("p.ts",)), tmp_path, tmp_path / "p.wasm")
    text = str(info.value)
    if shutil.which("node"):
        assert f"npm ci --prefix {tmp_path / 'assemblyscript'}" in text
    assert "setup-toolchain.sh" in text


# ---- MessagePack: vectors ----------------------------------------------------------

@pytest.mark.parametrize("vector", CANONICAL, ids=[v["name"] for v in CANONICAL])
def test_canonical_vectors_round_trip(guest: Guest, vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    assert guest.bytes_result("t_copy", data) == data
    assert guest.bytes_result("t_typed", data) == data
    assert guest.with_bytes("t_validate", data) == OK
    assert guest.with_bytes("t_validate_utf8", data) == OK
    assert guest.with_bytes("t_skip", data) == len(data)
    assert guest.bytes_result("t_read_raw", data) == data
    # The writer's own bytes for the value, built from Python's decoding of it.
    assert pack(vector_value(vector["value"])) == data


@pytest.mark.parametrize("vector", DECODE_ONLY, ids=[v["name"] for v in DECODE_ONLY])
def test_decode_only_vectors_come_back_canonical(guest: Guest, vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    canonical = pack(vector_value(vector["value"]))
    assert guest.bytes_result("t_copy", data) == canonical
    assert guest.bytes_result("t_typed", data) == canonical


@pytest.mark.parametrize("vector", HOSTILE, ids=[v["name"] for v in HOSTILE])
def test_hostile_vectors_are_refused(guest: Guest, vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    assert guest.with_bytes("t_validate_utf8", data) < 0
    if vector["name"] == "invalid utf-8 in str":
        # The plain check trusts the host's UTF-8 (SPEC 2) and leaves it to validateUtf8.
        assert guest.with_bytes("t_validate", data) == OK
        assert guest.with_bytes("t_utf8_valid", b"\xff\xff") == 0
        return
    assert guest.with_bytes("t_validate", data) < 0
    if vector["name"] not in ("trailing bytes", "non-string map key"):
        assert guest.bytes_result("t_copy", data) in (TRUNCATED, DEPTH, MALFORMED)
    # The SDK answers such a request with `invalid`, never a trap.
    response = guest.export_call({"hook": "echo", "data": None}) if not data else None
    if response is not None:
        assert response["ok"] is True
    ptr, n = guest.put(data)
    answer = unpack(guest.result(guest.call("wasmext_call", ptr, n)))
    assert answer["ok"] is False
    assert answer["error"]["code"] == "invalid"


def test_every_truncation_is_refused(guest: Guest) -> None:
    for vector in CANONICAL + DECODE_ONLY:
        data = bytes.fromhex(vector["hex"])
        cuts = range(len(data)) if len(data) < 600 else [0, 1, 2, 3, 4, len(data) - 1]
        for cut in cuts:
            part = data[:cut]
            assert guest.with_bytes("t_validate", part) == TRUNCATED, (vector["name"], cut)
            assert guest.bytes_result("t_copy", part) == TRUNCATED, (vector["name"], cut)
            assert guest.with_bytes("t_skip", part) == TRUNCATED, (vector["name"], cut)


@pytest.mark.parametrize("header", ["dbffffffff", "c6ffffffff", "ddffffffff", "dfffffffff",
                                    "da ffff", "c5ffff", "dcffff", "deffff", "d9ff", "c4ff"])
def test_huge_declared_lengths_cost_nothing(guest: Guest, header: str) -> None:
    data = bytes.fromhex(header.replace(" ", "")) + b"\x01" * 16
    assert guest.with_bytes("t_validate", data) == TRUNCATED
    assert guest.bytes_result("t_copy", data) == TRUNCATED
    ptr, n = guest.put(data)
    fuel = guest.fuel_used(lambda: guest.call("t_validate", ptr, n))
    assert fuel < 2000, fuel


@pytest.mark.parametrize("kind", ["array", "map"])
def test_depth_64_is_accepted_and_65_refused(guest: Guest, kind: str) -> None:
    def nested(n: int) -> bytes:
        opener = b"\x91" if kind == "array" else b"\x81\xa1k"
        return opener * n + b"\xc0"

    for n in (63, 64):
        assert guest.with_bytes("t_validate", nested(n)) == OK
        assert guest.bytes_result("t_copy", nested(n)) == nested(n)
        assert guest.with_bytes("t_skip", nested(n)) == len(nested(n))
    assert guest.with_bytes("t_validate", nested(65)) == DEPTH
    assert guest.bytes_result("t_copy", nested(65)) == DEPTH
    assert guest.with_bytes("t_skip", nested(65)) == DEPTH
    assert guest.with_bytes("t_validate", nested(100)) == DEPTH
    # Empty containers count too.
    empty = (b"\x91" * 64) + (b"\x90" if kind == "array" else b"\x80")
    assert guest.with_bytes("t_validate", empty) == DEPTH


# ---- MessagePack: encodings at every boundary ---------------------------------------

@pytest.mark.parametrize("value", BOUNDARY_INTS)
def test_integers_use_the_smallest_encoding(guest: Guest, value: int) -> None:
    if value < 2**63:
        assert guest.result(guest.call("t_write_int", value)) == pack(value)
    if value >= 0:
        signed = value - 2**64 if value >= 2**63 else value  # wasmtime passes i64
        assert guest.result(guest.call("t_write_uint", signed)) == pack(value)
    encoded = pack(value)
    assert guest.bytes_result("t_copy", encoded) == encoded
    if value < 2**63:
        assert guest.with_bytes("t_read_int", encoded) == value
        assert guest.call("t_last_err") == OK
    else:
        assert guest.with_bytes("t_read_int", encoded) == 0
        assert guest.call("t_last_err") == RANGE
        assert guest.call("t_last_pos") == 0
    uint = guest.with_bytes("t_read_uint", encoded)
    if value >= 0:
        assert uint % 2**64 == value
        assert guest.call("t_last_err") == OK
    else:
        assert guest.call("t_last_err") == RANGE
    i32 = guest.with_bytes("t_read_i32", encoded)
    if -(2**31) <= value < 2**31:
        assert (i32, guest.call("t_last_err")) == (value, OK)
    else:
        assert guest.call("t_last_err") == RANGE
    assert guest.with_bytes("t_read_float", encoded) == float(value)


@pytest.mark.parametrize("n", LENGTHS)
def test_headers_use_the_smallest_encoding(guest: Guest, n: int) -> None:
    packer = msgpack.Packer(use_bin_type=True)
    expected_str = packer.pack("a" * n)[: -n or None] if n < 70_000 else b"\xdb" + n.to_bytes(4)
    expected_bin = (packer.pack(b"a" * n)[: -n or None] if n < 70_000
                    else b"\xc6" + n.to_bytes(4))
    assert guest.result(guest.call("t_write_header", 0, n)) == expected_str
    assert guest.result(guest.call("t_write_header", 1, n)) == expected_bin
    assert guest.result(guest.call("t_write_header", 2, n)) == packer.pack_array_header(n)
    assert guest.result(guest.call("t_write_header", 3, n)) == packer.pack_map_header(n)


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -0.25, 1e300, float("inf")])
def test_floats_are_written_as_float64(guest: Guest, value: float) -> None:
    assert guest.result(guest.call("t_write_float", value)) == pack(value)
    if abs(value) > 3e38 and value != float("inf"):
        return
    f32 = msgpack.packb(value, use_single_float=True)
    assert guest.bytes_result("t_copy", f32) == pack(float(unpack(f32)))


def test_strings_through_utf16_and_back(guest: Guest) -> None:
    for text in ["", "plain", "héllo wörld ✓ 😀", "x" * 40, "ü" * 40_000, "\u0000nul", "𝄞" * 3]:
        data = text.encode("utf-8")
        assert guest.bytes_result("t_write_string", data) == pack(text), text[:10]
        assert guest.bytes_result("t_read_string", pack(text)) == data
        assert guest.with_bytes("t_utf8_valid", data) == 1
        a, n = guest.put(data)
        s, m = guest.put(data)
        assert guest.call("t_utf8_equals", a, n, s, m) == 1
    a, n = guest.put(b"hello")
    s, m = guest.put("héllo".encode())
    assert guest.call("t_utf8_equals", a, n, s, m) == 0
    s, m = guest.put(b"hell")
    assert guest.call("t_utf8_equals", a, n, s, m) == 0
    assert guest.result(guest.call("t_write_lone_surrogate")) == pack("a\ufffdb")


@pytest.mark.parametrize(("text", "valid"), [
    (b"", True), (b"ascii only, more than eight bytes", True), ("é✓😀".encode(), True),
    (b"\xc0\x80", False), (b"\xe0\x80\x80", False), (b"\xed\xa0\x80", False),
    (b"\xf4\x90\x80\x80", False), (b"\xf5\x80\x80\x80", False), (b"\x80", False),
    (b"abc\xe2\x82", False), (b"\xef\xbf\xbf", True), (b"\xf4\x8f\xbf\xbf", True),
])
def test_utf8_check(guest: Guest, text: bytes, valid: bool) -> None:
    assert guest.with_bytes("t_utf8_valid", text) == int(valid)
    encoded = bytes([0xa0 | len(text)]) + text if len(text) < 32 else b"\xd9" + bytes(
        [len(text)]) + text
    assert (guest.with_bytes("t_validate_utf8", encoded) == OK) is valid


def test_typed_reads_refuse_other_types(guest: Guest) -> None:
    s = pack("text")
    assert guest.with_bytes("t_read_int", s) == 0
    assert (guest.call("t_last_err"), guest.call("t_last_pos")) == (TYPE, 0)
    assert guest.with_bytes("t_read_bool", pack(1)) == 0
    assert guest.call("t_last_err") == TYPE
    assert guest.with_bytes("t_read_array", pack({"a": 1})) == 0
    assert guest.call("t_last_err") == TYPE
    assert guest.with_bytes("t_read_map", pack({"a": 1, "b": 2})) == 2
    assert (guest.call("t_last_err"), guest.call("t_last_pos")) == (OK, 1)
    assert guest.with_bytes("t_read_float", pack("1.5")) == 0
    assert guest.call("t_last_err") == TYPE
    assert guest.with_bytes("t_read_bool", pack(True)) == 1
    # Errors are sticky: the second read returns 0 and the first error stays.
    assert guest.with_bytes("t_sticky", pack(5)) == 0
    assert (guest.call("t_last_err"), guest.call("t_last_pos")) == (TYPE, 0)
    kinds = [(None, T_NIL), (True, T_BOOL), (1, T_INT), (2**64 - 1, T_UINT), (1.5, T_FLOAT),
             ("s", T_STR), (b"b", T_BIN)]
    for value, kind in kinds:
        assert guest.with_bytes("t_peek", pack(value)) == kind
    assert guest.with_bytes("t_peek", pack([1])) == T_ARRAY
    assert guest.with_bytes("t_peek", pack({})) == T_MAP
    assert guest.with_bytes("t_peek", b"\xc1") == T_INVALID
    assert guest.with_bytes("t_peek", b"") == T_INVALID
    assert guest.call("t_last_err") == OK  # peeking never sets the error


def test_find(guest: Guest) -> None:
    doc = pack({"a": [1, 2, {"x": 1}], "héllo": "wörld", "z": None})
    for key, value in [("a", [1, 2, {"x": 1}]), ("héllo", "wörld"), ("z", None)]:
        k, n = guest.put(key.encode())
        d, m = guest.put(doc)
        assert guest.result(guest.call("t_find", d, m, k, n)) == pack(value)
    k, n = guest.put(b"missing")
    d, m = guest.put(doc)
    assert guest.call("t_find", d, m, k, n) == -1
    d, m = guest.put(pack([1, 2]))
    assert guest.call("t_find", d, m, k, n) == -1


def test_writer_grows_and_helpers_work(guest: Guest) -> None:
    for n in (0, 10, 100, 70_000):
        assert guest.result(guest.call("t_write_many", n)) == pack(list(range(-40, n - 40)))
    assert guest.call("t_writer_misc") == 0


@settings(max_examples=400, deadline=None, suppress_health_check=FIXTURE_OK)
@given(data=st.binary(max_size=64))
def test_random_bytes_never_trap_and_agree_with_python(guest: Guest, data: bytes) -> None:
    verdict = guest.with_bytes("t_validate_utf8", data)
    if guest.with_bytes("t_validate", data) == OK:
        assert verdict in (OK, MALFORMED)  # only UTF-8 can tell them apart
    copy = guest.bytes_result("t_copy", data)
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=None)
    except Exception:  # anything msgpack refuses
        value = ...
    if verdict == OK:
        assert value is not ...
        assert isinstance(copy, bytes)
        assert unpack(copy) == value or (value != value)  # NaN
        return
    assert not isinstance(copy, bytes) or verdict in (MALFORMED,)
    assert value is ... or not plain(value), "python decoded what the SDK refused"


def plain(value: Any) -> bool:
    """Only what the SDK must accept: no ext types, string map keys."""
    if isinstance(value, msgpack.ExtType):
        return False
    if isinstance(value, list):
        return all(plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    return True


@settings(max_examples=200, deadline=None, suppress_health_check=FIXTURE_OK)
@given(value=st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=40) | st.binary(max_size=40),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=20))
def test_random_values_round_trip(guest: Guest, value: Any) -> None:
    data = pack(value)
    assert guest.bytes_result("t_copy", data) == data
    assert guest.bytes_result("t_typed", data) == data


# ---- host services ------------------------------------------------------------------

def ok_answer(value: Any) -> Answerer:
    return lambda _request: pack({"ok": True, "value": value})


def describe(guest: Guest, packed: int) -> dict[str, Any]:
    answer: dict[str, Any] = unpack(guest.result(packed))
    return answer


def test_config_get_sends_the_op_and_decodes_the_answer(guest: Guest) -> None:
    guest.answer = ok_answer({"nested": [1, "two"]})
    got = describe(guest, guest.with_bytes("t_config_get", b"greeting"))
    assert guest.requests[-1] == {"op": "config.get", "key": "greeting"}
    assert (got["ok"], got["code"], got["value"]) == (True, "", {"nested": [1, "two"]})
    assert unpack(got["raw"]) == {"ok": True, "value": {"nested": [1, "two"]}}
    guest.answer = lambda _r: pack({"ok": True})
    assert describe(guest, guest.with_bytes("t_config_get", b"k"))["value"] is None
    guest.answer = ok_answer("Servus")
    assert guest.result(guest.with_bytes("t_value_string", b"greeting")) == b"Servus"
    guest.answer = ok_answer(3)
    assert guest.result(guest.with_bytes("t_value_string", b"count")) == b"<null>"


def test_other_wrappers_send_their_ops(guest: Guest) -> None:
    describe(guest, guest.call("t_config_all"))
    assert guest.requests[-1] == {"op": "config.get"}
    describe(guest, guest.with_bytes("t_secret_get", b"token"))
    assert guest.requests[-1] == {"op": "secret.get", "key": "token"}
    describe(guest, guest.call("t_request"))
    assert guest.requests[-1] == {"op": "state.get", "key": "k"}


def test_failed_answers_keep_code_and_message(guest: Guest) -> None:
    guest.answer = lambda _r: pack({"ok": False, "error": {"code": "denied", "message": "no"}})
    got = describe(guest, guest.with_bytes("t_config_get", b"x"))
    assert (got["ok"], got["code"], got["message"], got["value"]) == (False, "denied", "no", None)
    guest.answer = lambda _r: pack({"ok": False, "error": {"code": "not_found"}})
    got = describe(guest, guest.with_bytes("t_config_get", b"x"))
    assert (got["code"], got["message"]) == ("not_found", "")


@pytest.mark.parametrize(("answer", "message"), [
    (0, "could not deliver"),
    ((0x7FFF0000, 16), "outside memory"),
    (b"\xc1", "malformed"),
    (pack([1, 2]), "malformed"),
    (pack({"value": 1}), "malformed"),
    (pack({"ok": 1}), "malformed"),
    (pack({"ok": False}), "malformed"),
    (pack({"ok": False, "error": {"message": "x"}}), "malformed"),
    (pack({"ok": False, "error": "x"}), "malformed"),
    (pack({"ok": True}) + b"\x00", "malformed"),
    (b"\x91" * 70 + b"\xc0", "malformed"),
])
def test_broken_answers_become_internal(guest: Guest, answer: Any, message: str) -> None:
    guest.answer = lambda _r: answer
    got = describe(guest, guest.with_bytes("t_config_get", b"x"))
    assert (got["ok"], got["code"]) == (False, "internal")
    assert message in got["message"]
    assert unpack(got["raw"])["error"]["code"] == "internal"


def test_answer_regions_are_given_back(guest: Guest) -> None:
    guest.answer = ok_answer("v" * 50_000)
    for _ in range(3):
        describe(guest, guest.with_bytes("t_config_get", b"x"))
    pages = guest.memory.size(guest.store)
    for _ in range(200):
        describe(guest, guest.with_bytes("t_config_get", b"x"))
    assert guest.memory.size(guest.store) <= pages + 8  # 200 leaked answers would be 10 MB


def test_allocations_are_aligned_and_distinct(guest: Guest) -> None:
    regions = [guest.call("wasmext_alloc", n) for n in (0, 1, 7, 8, 100, 65536, 3)]
    assert all(r % 8 == 0 and r > 0 for r in regions)
    assert len(set(regions)) == len(regions)
    for r, n in zip(regions, (0, 1, 7, 8, 100, 65536, 3), strict=True):
        guest.call("wasmext_free", r, n)
    assert guest.call("wasmext_alloc", 0x7FFFFFFF) == 0  # too big: 0, not a trap
    assert guest.call("wasmext_alloc", 16) % 8 == 0  # and the heap is fine


def test_out_of_memory_through_the_host(built: dict[str, Path], rt: Runtime) -> None:
    from wasmext import MemoryLimitExceeded

    plugin = rt.load(built["conformance"], limits={"memory_bytes": 2 * 1024 * 1024})
    with pytest.raises(MemoryLimitExceeded):
        plugin.call("echo", "x" * 1_000_000)  # a 1 MiB input region and the output: > 2 MiB
    assert plugin.call("echo", "small").value == "small"


def test_log_and_registration_state(guest: Guest) -> None:
    ptr, n = guest.put("grüße".encode())
    guest.call("t_log", 3, ptr, n)
    assert guest.logs[-1] == (3, "grüße")
    assert guest.result(guest.call("t_plugin_id")) == b"harness-id"
    assert guest.call("t_host_minor") == 0


# ---- abort, trace, seed --------------------------------------------------------------

def test_abort_logs_then_traps(guest: Guest) -> None:
    with pytest.raises(wasmtime.Trap):
        guest.call("t_abort")
    assert guest.logs[-1] == (4, "abort: boom")  # abort() itself names no file


def test_runtime_errors_go_through_abort(guest: Guest) -> None:
    with pytest.raises(wasmtime.Trap):
        guest.call("t_bounds", 5)
    assert guest.logs[-1][1].startswith("abort: Index out of range (~lib/")
    with pytest.raises(wasmtime.Trap):
        guest.call("t_throw")
    assert guest.logs[-1][1].startswith("abort: thrown on purpose (harness.ts:")


def test_console_goes_to_the_log(guest: Guest) -> None:
    guest.call("t_console")
    assert guest.logs[-5:] == [(2, "to info"), (1, "to debug"), (3, "to warn"),
                               (4, "to error"), (4, "Assertion failed: math")]


def test_console_time_uses_the_wasi_clock(guest: Guest) -> None:
    guest.call("t_console_time")
    assert guest.logs[-2:] == [(2, "step: 1.5ms"), (3, "no timer 'step'")]


def test_trace_and_seed(guest: Guest) -> None:
    guest.call("t_trace")
    assert guest.logs[-1] == (1, "trace: tracing 1.5, 2.0")
    first = guest.call("t_random")
    assert 0 <= first < 1
    assert guest.call("t_random") != first


# ---- dispatch --------------------------------------------------------------------------

def test_registration_map(guest: Guest) -> None:
    reg = unpack(guest.result(guest.with_bytes("wasmext_register", pack({"abi": {"minor": 0}}))))
    assert reg["abi_minor"] == ABI_MINOR
    assert (reg["name"], reg["version"], reg["prompt"]) == ("harness", "9.9.9", "be nice")
    hooks = {(h["hook"], h.get("pattern")): h for h in reg["hooks"]}
    assert "priority" not in hooks[("echo", None)]
    assert hooks[("hook_name", None)]["priority"] == 90
    assert hooks[("on_tag", "pii.*")] == {"hook": "on_tag", "pattern": "pii.*"}
    assert hooks[("on_tag", "exact")] == {"hook": "on_tag", "priority": 10, "pattern": "exact"}


@pytest.mark.parametrize(("request_", "response"), [
    ({"hook": "echo", "data": {"a": [1, 2.5, None, b"\x00"]}},
     {"ok": True, "value": {"a": [1, 2.5, None, b"\x00"]}}),
    ({"hook": "echo"}, {"ok": True, "value": None}),
    ({"hook": "hook_name", "data": 1}, {"ok": True, "value": "hook_name"}),
    ({"hook": "meta", "data": 1, "meta": {"session": "s", "call": 3}},
     {"ok": True, "value": {"session": "s", "call": 3}}),
    ({"hook": "meta", "data": 1}, {"ok": True, "value": "no meta"}),
    ({"hook": "data_string", "data": "x"}, {"ok": True, "value": "string:x"}),
    ({"hook": "data_string", "data": 5}, {"ok": True, "value": "not a string"}),
    ({"hook": "stop_bare"}, {"ok": True, "stop": True}),
    ({"hook": "stop_value"}, {"ok": True, "value": "halt", "stop": True}),
    ({"hook": "resets_out"}, {"ok": True, "value": 8}),
    ({"hook": "registered_only", "data": 1}, {"ok": True}),
    ({"hook": "fail_no_message"}, {"ok": False, "error": {"code": "failed"}}),
    ({"hook": "host_fails"}, {"ok": False, "error": {"code": "not_found", "message": "no x"}}),
    ({"hook": "on_tag", "data": {"tag": "pii.email"}}, {"ok": True, "value": "pii handler"}),
    ({"hook": "on_tag", "data": {"tag": "exact"}}, {"ok": True, "value": "exact handler"}),
    ({"extra": 1, "data": 2, "hook": "echo"}, {"ok": True, "value": 2}),
])
def test_dispatch(guest: Guest, request_: dict[str, Any], response: dict[str, Any]) -> None:
    guest.answer = lambda _r: pack({"ok": False, "error": {"code": "not_found",
                                                           "message": "no x"}})
    assert guest.export_call(request_) == response


@pytest.mark.parametrize(("request_", "code", "message"), [
    ({"hook": "nope"}, "unhandled", "no handler for hook 'nope'"),
    ({"hook": "on_tag", "data": {"tag": "other"}}, "unhandled", "no handler"),
    ({"hook": "on_tag", "data": "no subject"}, "unhandled", "no handler"),
    ({"hook": "wrote_nothing"}, "failed", "wrote no value"),
    ({"hook": "bad_count"}, "failed", "malformed value"),
    ({"hook": "two_values"}, "failed", "malformed value"),
    ({"hook": "failed_without_fail"}, "failed", "without call.fail()"),
    ({"hook": "deep_value", "data": 64}, "failed", "malformed value"),
    ({"data": 1}, "invalid", "string \"hook\""),
    ({"hook": 1}, "invalid", "string \"hook\""),
    ([1, 2], "invalid", "string \"hook\""),
])
def test_dispatch_errors(guest: Guest, request_: Any, code: str, message: str) -> None:
    answer = guest.export_call(request_)
    assert answer["ok"] is False
    assert answer["error"]["code"] == code
    assert message in answer["error"].get("message", "")


def test_deepest_value_a_handler_may_write(guest: Guest) -> None:
    answer = guest.export_call({"hook": "deep_value", "data": 63})
    depth, value = 0, answer["value"]
    while isinstance(value, list):
        depth, value = depth + 1, value[0]
    assert depth == 63  # + the response map: the 64 containers the host accepts


def test_request_nesting(guest: Guest) -> None:
    def deep(n: int) -> Any:
        value: Any = None
        for _ in range(n):
            value = [value]
        return value

    assert guest.export_call({"hook": "echo", "data": deep(63)})["value"] == deep(63)
    answer = guest.export_call({"hook": "echo", "data": deep(64)})
    assert answer["error"] == {"code": "invalid", "message": "call request nests too deep"}


def test_state_survives_calls_and_garbage_is_collected(guest: Guest) -> None:
    big = "y" * 100_000
    for _ in range(3):
        guest.export_call({"hook": "echo", "data": big})
    pages = guest.memory.size(guest.store)
    for i in range(300):
        assert guest.export_call({"hook": "data_string", "data": big[: 1000 + i]})["ok"]
        assert guest.export_call({"hook": "echo", "data": [i, big]})["value"] == [i, big]
    assert guest.memory.size(guest.store) <= pages + 16
    assert guest.export_call({"hook": "hook_name"})["value"] == "hook_name"


# ---- the plugins through the real host ---------------------------------------------

@pytest.fixture(scope="module")
def built() -> dict[str, Path]:
    out = {}
    for name, folder in (("hello", HELLO), ("conformance", CONFORMANCE), ("harness", HARNESS)):
        compiled(folder)
        out[name] = folder
    return out


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    with Runtime() as runtime:
        yield runtime


def test_a_static_registration_is_shared_by_copies(built: dict[str, Path], rt: Runtime) -> None:
    first = rt.load(built["hello"], plugin_id="hello-a")
    copy = rt.load(built["hello"], plugin_id="hello-b")
    assert first.registration.shareable and len(copy._idle) == 0  # starts at its first call
    assert copy.call("greet", "Ada").value == "Hello, Ada!"


def test_hello_greets_with_setting_or_default(built: dict[str, Path], rt: Runtime) -> None:
    hello = rt.load(built["hello"])
    assert hello.call("greet", "Ada").value == "Hello, Ada!"
    assert [ln.text for ln in hello.log.lines][-1] == "Hello, Ada!"
    howdy = rt.load(built["hello"], settings={"greeting": "Howdy"})
    assert howdy.call("greet", "Bob").value == "Howdy, Bob!"
    with pytest.raises(PluginError) as err:
        hello.call("greet", 42)
    assert (err.value.code, err.value.message) == ("invalid", "greet expects a string")
    assert [h.priority for h in hello.registration.hooks] == [50]  # none sent: the manifest's


def test_modules_import_and_export_only_the_abi(built: dict[str, Path]) -> None:
    engine = wasmtime.Engine()
    for name in ("hello", "conformance"):
        wasm = next(built[name].glob("*.wasm"))
        module = wasmtime.Module.from_file(engine, str(wasm))
        assert {(i.module, i.name) for i in module.imports} <= {("wasmext", "host_call"),
                                                                ("wasmext", "log")}
        exports = {e.name for e in module.exports}
        assert exports == {"memory", "wasmext_abi_version", "wasmext_alloc", "wasmext_free",
                           "wasmext_register", "wasmext_call", "_initialize"}
        assert b"/work/" not in wasm.read_bytes() and str(ROOT).encode() not in wasm.read_bytes()


def test_traps_are_reported_with_the_abort_message(built: dict[str, Path], rt: Runtime) -> None:
    plugin = rt.load(built["harness"])
    with pytest.raises(GuestTrap):
        plugin.call("aborts")
    assert [ln.text for ln in plugin.log.lines][-1] == "abort: boom"
    with pytest.raises(GuestTrap):
        plugin.call("out_of_bounds", 3)
    assert "Index out of range" in [ln.text for ln in plugin.log.lines][-1]
    assert plugin.call("out_of_bounds", 0).value == 0  # a fresh instance serves again


def test_config_of_every_type(built: dict[str, Path], rt: Runtime) -> None:
    plugin = rt.load(built["conformance"], settings={"count": 7})
    assert plugin.call("config", "count").value == 7
    assert plugin.call("config", "enabled").value is True
    assert plugin.call("host", {"op": "abi.info"}).value["value"]["major"] == 1


def test_builds_are_reproducible_and_path_free(built: dict[str, Path], tmp_path: Path) -> None:
    from wasmext_cli.build import build_plugin

    first = next(built["conformance"].glob("*.wasm")).read_bytes()
    elsewhere = tmp_path / "some" / "other" / "place"
    elsewhere.mkdir(parents=True)
    for f in CONFORMANCE.iterdir():
        if f.suffix in (".ts", ".toml"):
            shutil.copy(f, elsewhere / f.name)
    again = build_plugin(elsewhere, out_dir=tmp_path / "out").wasm.read_bytes()
    assert first == again
