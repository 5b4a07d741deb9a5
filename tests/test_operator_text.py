"""Plugin text that reaches an operator is inert, bounded and redacted.

A hostile plugin writes OSC hyperlinks, BEL, CR/LF (a forged `FORGED: 2` line),
C1 controls and bidi overrides into its registration (name, version, hook
names, tool descriptions) and 480 KB of escapes into its error message; another
echoes a sensitive setting in its error. Driven through `wasmext inspect`,
`list` and `call` (subprocesses) and through `Runtime` / `Host`, nothing a
terminal would act on comes out, one error is one line of bounded length, the
secret appears nowhere, and a healthy plugin still answers.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import msgpack
import pytest
import wasmtime
from hypothesis import given, settings
from hypothesis import strategies as st

from wasmext import PluginError, Runtime
from wasmext.errors import DESCRIBE_CAP
from wasmext.observe.logs import json_handler
from wasmext.testing import DATA_AT, guest_wat, load_wat, make_host, packed, wat_bytes
from wasmext.text import (
    CAP,
    bounded_tree,
    clean,
    clean_lines,
    clean_tree,
    has_unsafe,
    is_unsafe,
    json_safe,
)

ROOT = Path(__file__).resolve().parents[1]
EVIL = "\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\x07\r\nFORGED: 2\u009b2J\u0085\u202e"
HOOK = "on_\x1b[2J\r\nFORGED: 2\u202e"
SECRET = "s3cr3t-value-42"
HIGH = 1 << 20  # a data segment far above the guest's heap


def inert(text: str, newlines: bool = True) -> bool:
    """No control, format, separator or surrogate character (but newlines, if allowed)."""
    return not any(unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"}
                   and not (newlines and c == "\n") for c in text)


# -- clean() ---------------------------------------------------------------------------------

@settings(max_examples=400, deadline=None)
@given(st.text(st.characters(codec=None, exclude_categories=()), max_size=3000),
       st.integers(min_value=32, max_value=2048))
def test_clean_is_inert_bounded_and_idempotent(text: str, limit: int) -> None:
    out = clean(text, limit)
    assert inert(out, newlines=False)
    assert len(out) <= limit
    assert clean(out, limit) == out
    lines = clean_lines(text, limit)
    assert inert(lines) and len(lines) <= limit and clean_lines(lines, limit) == lines


@given(st.text(max_size=200))
def test_clean_keeps_printable_text(text: str) -> None:
    if inert(text, newlines=False) and len(text) <= CAP:
        assert clean(text) == text


def test_clean_escapes_visibly_and_marks_the_cut() -> None:
    assert clean("a\r\nb\tc\x1b[2J\u202e") == "a\\r\\nb\\tc\\x1b[2J\\u202e"
    out = clean("\x1b" * 480_000)
    assert len(out) <= CAP and out.endswith(" chars]") and "…[+" in out
    hidden = int(out.rsplit("[+", 1)[1].split()[0])
    assert hidden + out.count("\\x1b") == 480_000


@given(st.recursive(st.none() | st.text() | st.integers(),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids,
                                                                             max_size=4),
                    max_leaves=20))
def test_json_safe_is_the_same_document(value: object) -> None:
    doc = json.dumps(value, ensure_ascii=False)
    safe = json_safe(doc)
    assert inert(safe) and json.loads(safe) == value
    assert inert(json_safe(json.dumps(clean_tree(value), ensure_ascii=False)))


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.text() | st.integers() | st.floats(allow_nan=False),
                    lambda kids: st.lists(kids, max_size=6) | st.dictionaries(st.text(), kids,
                                                                             max_size=6),
                    max_leaves=60),
       st.integers(min_value=200, max_value=5000))
def test_bounded_tree_fits_its_characters_and_says_what_it_left_out(
        value: object, chars: int) -> None:
    tree, omitted = bounded_tree(value, chars)
    doc = json_safe(json.dumps(tree, indent=2, ensure_ascii=False))
    assert inert(doc) and json.loads(doc) == tree
    assert len(doc) <= chars
    if omitted == 0:  # nothing left out: what clean_tree gives
        assert tree == clean_tree(value)
    whole = bounded_tree(value, 10**9)
    assert whole == (clean_tree(value), 0)


def test_bounded_tree_of_many_tiny_values_is_cut_not_amplified() -> None:
    deep: object = [{}] * 200_000
    for _ in range(40):
        deep = [deep]
    tree, omitted = bounded_tree({"id": "x", "junk": deep}, 100_000)
    doc = json.dumps(tree, indent=2)
    assert len(doc) <= 100_000 and omitted >= 190_000 and tree["id"] == "x"


# -- hostile plugins -------------------------------------------------------------------------

def hostile_registration() -> dict[str, object]:
    return {"name": "n" + EVIL, "version": "1.0" + EVIL,
            "hooks": [{"hook": "test"}, {"hook": HOOK, "pattern": "p" + EVIL}],
            "tools": [{"name": "t", "description": "d" + EVIL}], "note": "x" + EVIL}


def big_error_wat() -> str:
    """A plugin answering {"ok": false} with a 480 KB code/message full of escapes."""
    message = ("\x1b]8;;http://x/\x07\x1b[31m\r\nFORGED: 2\u009b\u202e" * 20_000)[:480_000]
    resp = msgpack.packb({"ok": False, "error": {"code": "E\x1b[2J\r\n" * 100,
                                                 "message": message}})
    extra = f'(data (i32.const {HIGH}) "{wat_bytes(resp)}")'
    return guest_wat(f"(i64.const {packed(HIGH, len(resp))})", memory_pages=32, extra=extra,
                     registration=hostile_registration())


def echo_secret_wat() -> str:
    """A plugin that reads the sensitive setting `token` and puts it in its error message."""
    req = msgpack.packb({"op": "secret.get", "key": "token"})
    template = msgpack.packb({"ok": False, "error": {
        "code": "leak", "message": "token=" + "?" * len(SECRET) + " \x1b[31m\r\nFORGED: 2"}})
    resp_at = DATA_AT + 256
    dst = resp_at + template.index(b"?" * len(SECRET))
    body = f"""(local $r i64) (local $end i32)
      (local.set $r (call $host_call (i32.const {DATA_AT}) (i32.const {len(req)})))
      (local.set $end (i32.add (i32.wrap_i64 (i64.shr_u (local.get $r) (i64.const 32)))
                               (i32.wrap_i64 (local.get $r))))
      (memory.copy (i32.const {dst}) (i32.sub (local.get $end) (i32.const {len(SECRET)}))
                   (i32.const {len(SECRET)}))
      (i64.const {packed(resp_at, len(template))})"""
    data = req + b"\0" * (256 - len(req)) + template
    return guest_wat(body, data=data, imports='(import "wasmext" "host_call" '
                     '(func $host_call (param i32 i32) (result i64)))')


def folder(parent: Path, plugin_id: str, wat: str, toml: str = "") -> Path:
    path = parent / plugin_id
    path.mkdir(parents=True)
    (path / f"{plugin_id}.wasm").write_bytes(wasmtime.wat2wasm(wat))
    (path / "plugin.toml").write_text(f'id = "{plugin_id}"\nversion = "1.0.0"\n{toml}')
    return path


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plugins")
    folder(root, "hostile", big_error_wat())
    folder(root, "leaky", echo_secret_wat(), "[settings.token]\nsensitive = true\n")
    folder(root, "healthy", guest_wat(response={"ok": True, "value": "fine"}))
    return root


def wasmext(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "XDG_CACHE_HOME": str(cwd / "xdg"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "host"), str(ROOT / "cli"),
                                          os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "wasmext_cli", *args], capture_output=True,
                          text=True, encoding="utf-8", timeout=120, cwd=cwd, env=env)


def check_output(proc: subprocess.CompletedProcess[str]) -> None:
    for stream in (proc.stdout, proc.stderr):
        assert inert(stream), ascii(stream[:400])
        assert "\nFORGED" not in stream
        assert all(len(line) <= DESCRIBE_CAP for line in stream.splitlines())


# -- through the command line (subprocesses) -------------------------------------------------

@pytest.mark.parametrize("as_json", [False, True])
def test_cli_inspect_prints_no_control_characters(plugins: Path, tmp_path: Path,
                                                  as_json: bool) -> None:
    proc = wasmext("inspect", str(plugins / "hostile"), *(["--json"] if as_json else []),
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    check_output(proc)
    assert "FORGED: 2" in proc.stdout  # shown, escaped, on the line it belongs to
    if as_json:
        info = json.loads(proc.stdout)
        assert all(inert(h["hook"], newlines=False) for h in info["hooks"])
        assert inert(info["name"], newlines=False) and inert(info["version"], newlines=False)


@pytest.mark.parametrize("as_json", [False, True])
def test_cli_list_prints_no_control_characters(plugins: Path, tmp_path: Path,
                                               as_json: bool) -> None:
    proc = wasmext("list", "--plugins", str(plugins), *(["--json"] if as_json else []),
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    check_output(proc)
    assert "healthy" in proc.stdout and "hostile" in proc.stdout


def test_cli_call_prints_a_huge_hostile_error_as_one_bounded_line(plugins: Path,
                                                                   tmp_path: Path) -> None:
    proc = wasmext("call", str(plugins / "hostile"), "test", cwd=tmp_path)
    assert proc.returncode == 1
    check_output(proc)
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert len(proc.stderr) <= DESCRIBE_CAP + 1 and "chars]" in proc.stderr
    healthy = wasmext("call", str(plugins / "healthy"), "test", cwd=tmp_path)
    assert healthy.returncode == 0 and json.loads(healthy.stdout) == "fine"


def test_cli_call_never_prints_a_sensitive_setting(plugins: Path, tmp_path: Path) -> None:
    proc = wasmext("call", str(plugins / "leaky"), "test", "--set", f"token={SECRET}",
                   "--grant", "secrets", "--log", cwd=tmp_path)
    assert proc.returncode == 1
    check_output(proc)
    assert "token=***" in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr


# -- through Runtime and Host ---------------------------------------------------------------

def test_runtime_error_and_registration_are_clean() -> None:
    with Runtime(cache=False) as rt:
        plugin = load_wat(rt, big_error_wat(), plugin_id="hostile")
        info = plugin.describe()
        for text in (info["name"], info["version"], *[h["hook"] for h in info["hooks"]],
                     *[h["pattern"] or "" for h in info["hooks"]]):
            assert inert(text, newlines=False) and len(text) <= 256
        with pytest.raises(PluginError) as caught:
            plugin.call("test")
        err = caught.value
        for text in (err.message, err.code, str(err), err.describe()):
            assert inert(text, newlines=False) and len(text) <= DESCRIBE_CAP
        healthy = load_wat(rt, guest_wat(response={"ok": True, "value": "fine"}),
                           plugin_id="healthy")
        assert healthy.call("test").value == "fine"
        assert plugin.faults == 0  # a PluginError is a clean failure, not a fault


def test_host_tool_descriptions_trace_and_faults_are_clean() -> None:
    host = make_host((big_error_wat(), {"plugin_id": "hostile"}),
                     (guest_wat(response={"ok": True, "value": "fine"}), {"plugin_id": "ok"}))
    with host:
        tool = host.tools.tools["hostile__t"]
        assert inert(tool.description) and "FORGED" in tool.description
        with host.session() as session:
            result, error = host.try_call("hostile", "test", None, session)
            assert result is None and error is not None
            assert inert(error, newlines=False) and len(error) <= DESCRIBE_CAP
            for event in session.trace.events:
                assert inert(event.hook, newlines=False)
                assert event.detail is None or (inert(event.detail, newlines=False)
                                                and len(event.detail) <= CAP)
            assert host.try_call("ok", "test", None, session)[0].value == "fine"
        record = host.faults[-1]
        assert inert(record.message, newlines=False) and len(record.message) <= CAP


def test_a_sensitive_setting_echoed_in_an_error_is_redacted_everywhere(plugins: Path) -> None:
    stream = io.StringIO()
    handler = json_handler(stream)  # no secrets registry: redaction must already be done
    logger = logging.getLogger("wasmext")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        host = make_host((plugins / "leaky", {"settings": {"token": SECRET},
                                              "grants": ["secrets"]}))
        with host:
            with pytest.raises(PluginError) as caught:
                host.plugins["leaky"].plugin.call("test")
            with host.session() as session:
                _, error = host.try_call("leaky", "test", None, session)
                trace = json.dumps([e.as_dict() for e in session.trace.events])
            faults = json.dumps([vars(f) for f in host.faults])
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    err = caught.value
    assert "token=***" in err.message
    for text in (str(err), err.describe(), repr(err.args), error or "", trace, faults,
                 stream.getvalue()):
        assert SECRET not in text
    assert "token=***" in stream.getvalue()


@given(st.text() | st.text(st.characters(max_codepoint=0x7F)))
def test_has_unsafe_answers_as_is_unsafe_over_every_character(text: str) -> None:
    assert has_unsafe(text) == any(map(is_unsafe, text))
