"""The JavaScript guest SDK outside the component: its MessagePack codec and its
bundler run under node; its WIT copy and its builder."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from support import ROOT, VECTORS
from wasmext.manifest import BuildSpec

SDK = ROOT / "guest-sdks" / "javascript"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed (apt-get install "
                                "nodejs; see guest-sdks/javascript/setup-toolchain.sh)")

VECTOR_CHECK = """
import { pack, unpack, MsgpackError } from "%(sdk)s/src/msgpack.js";
import { readFileSync } from "node:fs";
const hex = (u) => Buffer.from(u).toString("hex");
const bytes = (h) => new Uint8Array(Buffer.from(h, "hex"));
const doc = JSON.parse(readFileSync("%(vectors)s/msgpack.json"));
const out = { canonical: [], decode_only: [], hostile: [] };
for (const v of doc.canonical) out.canonical.push([v.name, hex(pack(unpack(bytes(v.hex))))]);
for (const v of doc.decode_only) out.decode_only.push([v.name, hex(pack(unpack(bytes(v.hex))))]);
for (const c of JSON.parse(readFileSync("%(vectors)s/hostile.json")).hostile) {
  try { unpack(bytes(c.hex)); out.hostile.push([c.name, "accepted"]); }
  catch (e) { out.hostile.push([c.name, e instanceof MsgpackError ? "refused" : String(e)]); }
}
console.log(JSON.stringify(out));
"""


def node(script: str, tmp_path: Path) -> str:
    path = tmp_path / "check.mjs"
    path.write_text(script)
    assert NODE is not None
    proc = subprocess.run([NODE, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@needs_node
def test_codec_meets_the_vectors(tmp_path: Path) -> None:
    out = json.loads(node(VECTOR_CHECK % {"sdk": SDK, "vectors": VECTORS}, tmp_path))
    doc = json.loads((VECTORS / "msgpack.json").read_text())
    # Decoding then encoding gives the canonical bytes back, for every width.
    assert out["canonical"] == [[v["name"], v["hex"]] for v in doc["canonical"]]
    assert [name for name, _ in out["decode_only"]] == [v["name"] for v in doc["decode_only"]]
    assert all(verdict == "refused" for _, verdict in out["hostile"]), out["hostile"]


@needs_node
def test_the_bundle_is_one_valid_module(tmp_path: Path) -> None:
    script = (f'import {{ bundle }} from "{SDK}/bundle.mjs";\n'
              'import { readFileSync } from "node:fs";\n'
              f'console.log(bundle(readFileSync("{SDK}/conformance/conformance.js", "utf8")));\n')
    text = node(script, tmp_path)
    imports = [ln for ln in text.splitlines() if ln.startswith("import ")]
    assert imports == ['import { hostCall as __wasmextHostCall, log as __wasmextLog } from '
                       '"wasmext:plugin/host@1.0.0";']
    assert "export const { register, call } = definePlugin(new Conformance());" in text
    checked = tmp_path / "bundle.mjs"
    checked.write_text(text)
    assert NODE is not None
    proc = subprocess.run([NODE, "--check", str(checked)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_sdk_ships_the_world_of_the_abi() -> None:
    assert (SDK / "wit" / "plugin.wit").read_text() == \
        (ROOT / "abi" / "wit" / "plugin.wit").read_text()


def test_hello_is_short() -> None:
    assert len((SDK / "examples" / "hello" / "hello.js").read_text().splitlines()) <= 30


def test_the_builder_refuses_other_sources(tmp_path: Path) -> None:
    from wasmext_cli.build import BuildError, ToolchainMissing
    from wasmext_cli.build.javascript import commands

    try:
        cmd = commands(BuildSpec("javascript", ("hello.js",)), tmp_path, tmp_path / "o.wasm")
    except ToolchainMissing:
        pytest.skip("componentize-js is not installed (guest-sdks/javascript/setup-toolchain.sh)")
    assert cmd[0][-2:] == [str(tmp_path / "hello.js"), str(tmp_path / "o.wasm")]
    with pytest.raises(BuildError, match=r"must be a \.js file"):
        commands(BuildSpec("javascript", ("hello.py",)), tmp_path, tmp_path / "o.wasm")


ANSWER_CHECK = """
import { pack, packAnswer, unpack } from "%(sdk)s/src/msgpack.js";
import { readFileSync } from "node:fs";
const hex = (u) => Buffer.from(u).toString("hex");
const bytes = (h) => new Uint8Array(Buffer.from(h, "hex"));
const doc = JSON.parse(readFileSync("%(vectors)s/msgpack.json"));
const out = [];
for (const v of doc.canonical) {
  const value = unpack(bytes(v.hex));
  out.push([v.name, hex(packAnswer(value)) === hex(pack({ ok: true, value }))]);
}
let deep = 0;
for (let i = 0; i < 62; i++) deep = [deep];
out.push(["62 deep", hex(packAnswer(deep)) === hex(pack({ ok: true, value: deep }))]);
let refused = 0;
for (const f of [() => pack({ ok: true, value: [[deep]] }), () => packAnswer([[deep]])]) {
  try { f(); } catch (e) { refused += 1; }
}
out.push(["64 deep refused by both", refused === 2]);
console.log(JSON.stringify(out));
"""


@needs_node
def test_the_answer_head_writer_matches_pack(tmp_path: Path) -> None:
    """packAnswer(v) (the lean call path's writer) gives pack({ok: true, value: v})'s
    bytes for every canonical vector, and refuses nesting where pack refuses it."""
    out = json.loads(node(ANSWER_CHECK % {"sdk": SDK, "vectors": VECTORS}, tmp_path))
    assert len(out) > 10
    assert [name for name, same in out if not same] == []


JSON_CHECK = """
import { jsonAnswer, readJson } from "%(sdk)s/src/json.js";
const text = (v) => {
  const out = jsonAnswer(v, 63);
  return out === null ? null : Buffer.from(out).toString();
};
let deep = 0;
for (let i = 0; i < 63; i++) deep = [deep];
let deepMap = {};
for (let i = 0; i < 62; i++) deepMap = { k: deepMap };
const cycle = { n: 1 };
cycle.self = cycle;
const cases = {
  plain: { a: [1, -2.5, "é😀", null, true], b: {} },
  nullProto: Object.assign(Object.create(null), { k: 1 }),
  deep63: deep,
  deep64: [deep],
  bin: { b: new Uint8Array([1, 2]) },
  map: new Map([[1, 2]]),
  date: [new Date(0)],
  nan: [NaN], inf: { x: -Infinity },
  undefinedMember: { a: undefined },
  hole: [1, , 3],
  big: [2n ** 60n],
  fn: { f() {} },
  instance: [new (class Point { constructor() { this.x = 1; } })()],
  toJSON: { toJSON() { return "x"; } },
  lone: ["\\ud800"],
  pair: ["\\ud83d\\ude00"],
  slash: ["\\\\ud800 as text"],
  wide: Array.from({ length: 300 }, (_, i) => (i & 1 ? i : { i, s: `v${i}` })),
  deepMap63: deepMap,
  deepMap64: [deepMap],
  subclassToJSON: [new (class extends Array { toJSON() { return "x"; } })()],
  hiddenToJSON: [Object.defineProperty({}, "toJSON", { value: () => 2 })],
  throwingGetter: { get x() { throw new Error("no"); } },
  cycle,
  nested: { a: { b: [1, { c: undefined }] } },
};
const out = {};
for (const [name, v] of Object.entries(cases)) out[name] = text(v);
out.read = readJson(new TextEncoder().encode('{"hook":"h","data":[1,"x"]}'));
try { readJson(new Uint8Array([0x7b, 0xff])); out.badUtf8 = "read"; }
catch (e) { out.badUtf8 = "refused"; }
console.log(JSON.stringify(out));
"""


@needs_node
def test_the_json_answer_writer_sends_only_what_json_carries_exactly(tmp_path: Path) -> None:
    """jsonAnswer writes {"ok":true,"value":...} only for values the host reads back as
    the MessagePack writer would have sent them; for the rest it answers null (the SDK
    then writes MessagePack)."""
    out = json.loads(node(JSON_CHECK % {"sdk": SDK}, tmp_path))
    assert json.loads(out["plain"]) == {"ok": True, "value": {"a": [1, -2.5, "é😀", None, True],
                                                              "b": {}}}
    assert json.loads(out["nullProto"]) == {"ok": True, "value": {"k": 1}}
    assert out["deep63"] is not None and out["deep64"] is None
    assert out["pair"] == '{"ok":true,"value":["😀"]}'
    wide = json.loads(out["wide"])["value"]
    assert len(wide) == 300 and wide[1] == 1 and wide[2] == {"i": 2, "s": "v2"}
    assert out["deepMap63"] is not None and out["deepMap64"] is None
    refused = ["bin", "map", "date", "nan", "inf", "undefinedMember", "hole", "big", "fn",
               "instance", "toJSON", "lone", "slash", "subclassToJSON", "hiddenToJSON",
               "throwingGetter", "cycle", "nested"]
    assert {name: out[name] for name in refused} == dict.fromkeys(refused)
    assert out["read"] == {"hook": "h", "data": [1, "x"]}
    assert out["badUtf8"] == "refused"
