"""The Rust guest SDK: its native unit tests, and plugins built with it end to end.

guest-sdks/rust/tests/sdk_tests.rs is compiled for this machine with
`rustc --test` (debug assertions and overflow checks on) and fed a cases file
written here from abi/vectors/*.json and abi/abi.toml, so the vectors and the
ABI table stay the single source of truth and the Rust side needs no JSON or
TOML parser. The end-to-end tests build a plugin that uses the parts of the
SDK the conformance plugin does not (panics, patterns, priorities, extra
registration entries, the request builder) and run it through the real host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import msgpack_case_rows
from wasmext import GuestTrap, PluginError, Runtime
from wasmext._abi import ABI_MINOR
from wasmext._toml import tomllib
from wasmext_cli.build import ToolchainMissing, build_plugin

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "guest-sdks" / "rust"
VECTORS = ROOT / "abi" / "vectors"
HELLO = SDK / "examples" / "hello"
CONFORMANCE = SDK / "conformance"


def _toolchain() -> str | None:
    """rustc, or None when the toolchain is missing (the reason is in _MISSING)."""
    from wasmext_cli.build import rust as build_rust

    try:
        return build_rust.rustc()
    except ToolchainMissing as exc:
        _MISSING.append(str(exc))
        return None


_MISSING: list[str] = []
RUSTC = _toolchain()

pytestmark = [
    pytest.mark.toolchain,
    pytest.mark.skipif(RUSTC is None, reason=_MISSING[0] if _MISSING else ""),
]




def abi_rows() -> list[tuple[str, ...]]:
    """abi/abi.toml as K rows: every constant the SDK writes by hand."""
    table = tomllib.loads((ROOT / "abi" / "abi.toml").read_text(encoding="utf-8"))
    v = table["version"]
    rows: list[tuple[str, ...]] = [("K", "version", str(v["major"]), str(v["minor"]))]
    rows += [("K", "limit", name, str(value)) for name, value in table["limits"].items()]
    rows += [("K", "code", e["code"]) for e in table["error_codes"]]
    rows += [("K", "op", o["op"], o["capability"], str(o["since"]), o["status"])
             for o in table["ops"]]
    rows += [("K", "log", name, str(value)) for name, value in table["log_levels"].items()]
    rows += [("K", "export", e["name"]) for e in table["exports"]]
    rows += [("K", "import", i["module"], i["name"]) for i in table["imports"]]
    return rows


def write_cases(path: Path) -> int:
    """The cases file sdk_tests.rs reads: KIND, NAME, HEX[, ARG...], tab-separated."""
    rows = msgpack_case_rows()
    rows += abi_rows()
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


def rustc(*args: str, cwd: Path) -> None:
    assert RUSTC is not None
    proc = subprocess.run([RUSTC, "--edition", "2021", "-O", "-C", "debug-assertions=on",
                           "-C", "overflow-checks=on", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"rustc {' '.join(args)} failed:\n{proc.stderr}"


@pytest.fixture(scope="module")
def test_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rust-sdk")
    rustc("--crate-type", "rlib", "--crate-name", "wasmext", "-o", str(out / "libwasmext.rlib"),
          str(SDK / "src" / "lib.rs"), cwd=out)
    rustc("--test", "--extern", f"wasmext={out / 'libwasmext.rlib'}", "-o", str(out / "sdk_tests"),
          str(SDK / "tests" / "sdk_tests.rs"), cwd=out)
    return out / "sdk_tests"


def run_tests(binary: Path, cases: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("WASMEXT_CASES", None)
    if cases is not None:
        env["WASMEXT_CASES"] = str(cases)
    return subprocess.run([str(binary), "--nocapture", *args], env=env, capture_output=True,
                          text=True, timeout=600)


def test_sdk_unit_tests(test_binary: Path, tmp_path: Path) -> None:
    cases = tmp_path / "cases.tsv"
    count = write_cases(cases)
    proc = run_tests(test_binary, cases)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert f"{count} file cases" in output, output
    assert "test result: ok" in output and " 0 failed" in output, output


def test_cases_file_covers_every_vector_and_constant(tmp_path: Path) -> None:
    """A vector or constant added under abi/ must reach the Rust tests without editing them."""
    cases = tmp_path / "cases.tsv"
    write_cases(cases)
    rows = [line.split("\t") for line in cases.read_text(encoding="utf-8").splitlines()]
    kinds = [r[0] for r in rows]
    vectors = json.loads((VECTORS / "msgpack.json").read_text(encoding="utf-8"))
    hostile = json.loads((VECTORS / "hostile.json").read_text(encoding="utf-8"))
    assert kinds.count("C") == len(vectors["canonical"])
    assert kinds.count("D") == len(vectors["decode_only"])
    assert kinds.count("H") == len(hostile["hostile"])
    table = tomllib.loads((ROOT / "abi" / "abi.toml").read_text(encoding="utf-8"))
    assert sum(r[:2] == ["K", "op"] for r in rows) == len(table["ops"])
    assert sum(r[:2] == ["K", "limit"] for r in rows) == len(table["limits"])


def test_abi_constants_mismatch_is_caught(test_binary: Path, tmp_path: Path) -> None:
    """The comparison with abi.toml really bites: a changed limit fails the run."""
    cases = tmp_path / "cases.tsv"
    write_cases(cases)
    text = cases.read_text(encoding="utf-8").replace("K\tlimit\tmax_msgpack_depth\t64",
                                                    "K\tlimit\tmax_msgpack_depth\t65")
    cases.write_text(text, encoding="utf-8")
    proc = run_tests(test_binary, cases, "vector_and_boundary_cases")
    assert proc.returncode != 0
    assert "max_msgpack_depth" in proc.stdout + proc.stderr


def test_missing_cases_file_is_an_error(test_binary: Path, tmp_path: Path) -> None:
    proc = run_tests(test_binary, tmp_path / "absent.tsv", "vector_and_boundary_cases")
    assert proc.returncode != 0
    assert "cannot open" in proc.stdout + proc.stderr


# ---- plugins through the real host -----------------------------------------------

EXTRAS_TOML = """\
id = "rust-sdk-extras"
version = "0.2.0"
abi = 1
capabilities = ["secrets"]

[build]
lang = "rust"
sources = ["extras.rs"]

[settings.greeting]
default = "hello"

[settings.token]
default = "s3cret"
sensitive = true
"""

EXTRAS_RS = r"""
//! Exercises the SDK surface the conformance plugin leaves out.
mod helper;

use wasmext::abi::op;
use wasmext::{Call, Error, Handler, Hook, Level, Plugin, Registration, Reply, Request, Result,
              Value, Writer};

struct Extras {
    calls: u64,
    greeting: String,
}

impl Plugin for Extras {
    const NAME: &'static str = "extras";
    const HOOKS: &'static [Hook<Self>] = &[
        Hook::new("count", Handler(Self::count)).priority(90),
        Hook::new("panic", Handler(Self::panic)),
        Hook::new("on_tag", Handler(Self::shout)).pattern("shout*").priority(10),
        Hook::new("on_tag", Handler(Self::whisper)).pattern("whisper"),
        Hook::passive("on_event"),
        Hook::new("secret", Handler(Self::secret)),
        Hook::new("settings", Handler(Self::settings)),
        Hook::new("probe", Handler(Self::probe)),
        Hook::new("info", Handler(Self::info)),
        Hook::new("value", Handler(Self::value)),
        Hook::new("big", Handler(Self::big)),
        Hook::new("trap_oob", Handler(Self::trap_oob)),
        Hook::new("remember", Handler(Self::remember)),
    ];

    fn init(&mut self, reg: &Registration<'_>) {
        if let Some(mut g) = reg.setting("greeting") {
            self.greeting = g.read_str().unwrap_or("?").to_owned();
        }
    }

    fn register_extra(&self, w: &mut Writer) -> usize {
        w.write_str("prompt").write_array(1).write_map(2);
        w.write_str("position").write_str("system_suffix");
        w.write_str("content").write_str("Be brief.");
        1
    }
}

impl Extras {
    fn count(&mut self, call: &mut Call) -> Result<Reply> {
        self.calls += 1;
        wasmext::log!(Level::Debug, "call {} of {}", self.calls, wasmext::plugin_id());
        call.reply(&(self.calls, self.greeting.as_str()))
    }

    fn panic(&mut self, call: &mut Call) -> Result<Reply> {
        let why = call.data_str()?;
        panic!("{}", why)
    }

    fn shout(&mut self, call: &mut Call) -> Result<Reply> {
        let text = helper::text_of(call)?;
        call.reply_str(&text.to_uppercase())
    }

    fn whisper(&mut self, call: &mut Call) -> Result<Reply> {
        let text = helper::text_of(call)?;
        call.reply_str(&text.to_lowercase())
    }

    fn secret(&mut self, call: &mut Call) -> Result<Reply> {
        let answer = wasmext::secret_get(call.data_str()?).check()?;
        call.reply_str(&answer.value_str()?.len().to_string())
    }

    fn settings(&mut self, call: &mut Call) -> Result<Reply> {
        let all = wasmext::config_all().check()?;
        call.reply(&all.decode_value()?)
    }

    fn probe(&mut self, call: &mut Call) -> Result<Reply> {
        let answer = Request::new("no.such.op").arg("x", &[1, 2]).send();
        call.reply(&(answer.is_ok(), answer.code()))
    }

    fn info(&mut self, call: &mut Call) -> Result<Reply> {
        let info = wasmext::abi_info().check()?.decode_value()?;
        let major = info.get("major").and_then(Value::as_i64);
        let major = major.ok_or_else(|| Error::failed("no major"))?;
        call.reply(&(major, wasmext::host_abi_minor()))
    }

    fn value(&mut self, call: &mut Call) -> Result<Reply> {
        let v = call.data_value()?;
        call.reply(&Value::Array(vec![v, Value::from("seen")]))
    }

    fn big(&mut self, call: &mut Call) -> Result<Reply> {
        let n = call.data().read_int_as::<usize>()?;
        call.reply_str(&"x".repeat(n))
    }

    /// data: [key, value] -> stores it with state.set, reads it back with state.get.
    fn remember(&mut self, call: &mut Call) -> Result<Reply> {
        let mut r = call.data();
        r.read_array()?;
        let key = r.read_str()?;
        let value = r.read_value()?;
        let set = Request::new(op::STATE_SET).arg("key", key).arg("value", &value);
        set.send().check()?;
        let back = Request::new(op::STATE_GET).arg("key", key).send().check()?;
        call.reply_raw(back.value_bytes())
    }

    fn trap_oob(&mut self, call: &mut Call) -> Result<Reply> {
        let v: Vec<u8> = Vec::new();
        let i = call.data().read_int_as::<usize>()?;
        call.reply(&v[i])
    }
}

wasmext::export_plugin!(Extras, Extras { calls: 0, greeting: String::new() });
"""

HELPER_RS = r"""
use wasmext::{Call, Error, Result};

/// The "text" of an on_tag call's data.
pub fn text_of<'a>(call: &Call<'a>) -> Result<&'a str> {
    let mut field = call.data().find("text")?.ok_or_else(|| Error::invalid("no text"))?;
    Ok(field.read_str()?)
}
"""


@pytest.fixture(scope="module")
def extras(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rust-extras")
    (folder / "plugin.toml").write_text(EXTRAS_TOML, encoding="utf-8")
    (folder / "extras.rs").write_text(EXTRAS_RS, encoding="utf-8")
    (folder / "helper.rs").write_text(HELPER_RS, encoding="utf-8")
    build_plugin(folder)
    return folder


@pytest.fixture(scope="module")
def built_examples() -> None:
    for folder in (HELLO, CONFORMANCE):
        build_plugin(folder)


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    with Runtime(cache=False) as runtime:
        yield runtime


def test_hello_greets_with_setting_or_default(rt: Runtime, built_examples: None) -> None:
    assert rt.load(HELLO).call("greet", "Ada").value == "Hello, Ada!"
    assert rt.load(HELLO, settings={"greeting": "Howdy"}).call("greet", "Bob").value == \
        "Howdy, Bob!"
    with pytest.raises(PluginError) as err:
        rt.load(HELLO).call("greet", 42)
    assert (err.value.code, err.value.message) == ("invalid", "data must be a string")


def test_modules_import_only_the_abi(built_examples: None, extras: Path) -> None:
    import wasmtime

    for folder, name in ((HELLO, "hello"), (CONFORMANCE, "rust-conformance"),
                         (extras, "rust-sdk-extras")):
        module = wasmtime.Module.from_file(wasmtime.Engine(), str(folder / f"{name}.wasm"))
        imports = {(i.module, i.name) for i in module.imports}
        assert imports <= {("wasmext", "host_call"), ("wasmext", "log")}, imports
        exports = {e.name for e in module.exports}
        assert {"memory", "wasmext_abi_version", "wasmext_alloc", "wasmext_free",
                "wasmext_register", "wasmext_call"} <= exports
        assert "_start" not in exports


def test_registration_priority_pattern_and_extras(rt: Runtime, extras: Path) -> None:
    plugin = rt.load(extras)
    hooks = [(h.hook, h.priority, h.pattern) for h in plugin.registration.hooks]
    assert hooks[:5] == [("count", 90, None), ("panic", 50, None), ("on_tag", 10, "shout*"),
                         ("on_tag", 50, "whisper"), ("on_event", 50, None)]
    assert plugin.registration.name == "extras"
    assert plugin.registration.version is None
    assert plugin.registration.extra == {"prompt": [{"position": "system_suffix",
                                                  "content": "Be brief."}]}


def test_instance_state_settings_and_log(rt: Runtime, extras: Path) -> None:
    plugin = rt.load(extras, settings={"greeting": "Servus"}, grants=["secrets"])
    assert plugin.call("count", None).value == [1, "Servus"]
    assert plugin.call("count", None).value == [2, "Servus"]
    assert plugin.log.lines[-1].text == "call 2 of rust-sdk-extras"
    assert plugin.call("settings", None).value == {"greeting": "Servus"}
    assert plugin.call("secret", "token").value == "6"
    assert plugin.call("probe", None).value == [False, "unsupported"]
    assert plugin.call("info", None).value == [1, ABI_MINOR]  # the minor both sides speak
    assert plugin.call("value", {"a": [1.5, b"\x00"]}).value == [{"a": [1.5, b"\x00"]}, "seen"]
    assert plugin.call("on_event", {"x": 1}).changed is False


def test_request_builder_with_state(extras: Path, tmp_path: Path) -> None:
    from wasmext import HostConfig
    from wasmext.testing import make_host

    stored = {"list": [1, "two", None], "bin": b"\x00\xff"}
    config = HostConfig(data_dir=tmp_path, state_backend="memory")
    with make_host((extras, {"plugin_id": "keeper", "grants": {"state"}}),
                   (extras, {"plugin_id": "stranger"}), config=config) as host:
        keeper = host.plugins["keeper"].plugin
        assert keeper.call("remember", ["k", stored], {"session": "s1"}).value == stored
        with pytest.raises(PluginError) as err:
            host.plugins["stranger"].plugin.call("remember", ["k", 1], {"session": "s1"})
        assert err.value.code == "denied"


def test_secret_needs_the_capability(rt: Runtime, extras: Path) -> None:
    with pytest.raises(PluginError) as err:
        rt.load(extras).call("secret", "token")
    assert err.value.code == "denied"


def test_tag_patterns(rt: Runtime, extras: Path) -> None:
    plugin = rt.load(extras)
    assert plugin.call("on_tag", {"tag": "shout.loud", "text": "Hi"}).value == "HI"
    assert plugin.call("on_tag", {"tag": "whisper", "text": "Hi"}).value == "hi"
    with pytest.raises(PluginError) as err:
        plugin.call("on_tag", {"tag": "whispers", "text": "Hi"})
    assert err.value.code == "unhandled"


def test_panic_traps_and_logs_its_message(rt: Runtime, extras: Path) -> None:
    plugin = rt.load(extras)
    with pytest.raises(GuestTrap):
        plugin.call("panic", "the reason")
    assert any("panic" in ln.text and "the reason" in ln.text for ln in plugin.log.lines), \
        [ln.text for ln in plugin.log.lines]
    with pytest.raises(GuestTrap):
        plugin.call("trap_oob", 3)
    # The next call gets a fresh instance.
    assert plugin.call("count", None).value == [1, "hello"]


def test_output_up_to_the_cap(rt: Runtime, extras: Path) -> None:
    plugin = rt.load(extras)
    n = 1_048_576 - 32
    assert len(plugin.call("big", n).value) == n


def test_deepest_data_round_trips(rt: Runtime, built_examples: None) -> None:
    plugin = rt.load(CONFORMANCE)
    value: Any = None
    for _ in range(63):  # 64 containers with the request map
        value = [value]
    assert plugin.call("echo", value).value == value


def test_fuel_per_call_is_modest(rt: Runtime, built_examples: None) -> None:
    """Guards the costs README.md quotes against regressions."""
    plugin: Any = rt.load(CONFORMANCE)
    inst = plugin._borrow()
    budget = plugin.limits.fuel_per_call

    def fuel(hook: str, data: Any) -> int:
        inst.call(hook, data)
        return int(budget - inst.fuel_left())

    assert fuel("echo", {"text": "x" * 70, "n": [1, 2, 3], "ok": True, "f": 1.5}) < 25_000
    assert fuel("echo", "é" * 200_000) < 15_000_000
    assert fuel("echo", bytes(512_000)) < 1_000_000


@pytest.mark.slow  # two full builds in two checkouts
def test_rust_builds_are_reproducible_across_checkouts(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    first = build_plugin(HELLO, out_dir=tmp_path / "a").wasm.read_bytes()
    # The same sources in another place, with a cold SDK cache.
    elsewhere = tmp_path / "some" / "other" / "checkout"
    shutil.copytree(SDK / "src", elsewhere / "rust" / "src")
    shutil.copytree(HELLO, elsewhere / "rust" / "examples" / "hello",
                    ignore=shutil.ignore_patterns("*.wasm"))
    monkeypatch.setenv("WASMEXT_SDK_DIR", str(elsewhere))
    monkeypatch.setenv("WASMEXT_RUST_CACHE", str(tmp_path / "cache"))
    second = build_plugin(elsewhere / "rust" / "examples" / "hello",
                          out_dir=tmp_path / "b").wasm.read_bytes()
    assert first == second


def test_missing_toolchain_names_the_install_command(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    from wasmext_cli.build import rust as build_rust

    monkeypatch.setenv("WASMEXT_RUSTC", str(tmp_path / "no-rustc"))
    with pytest.raises(ToolchainMissing) as err:
        build_plugin(HELLO, out_dir=tmp_path)
    assert build_rust.INSTALL_HINT in str(err.value)
