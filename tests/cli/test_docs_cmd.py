"""`wasmext docs` lists and prints the guides; what the wheel ships of them keeps every
relative link between them whole (hatch_build.py lays them out as in the checkout)."""

from __future__ import annotations

import importlib.util
import posixpath
import re
import sys
from pathlib import Path
from types import ModuleType

from click.testing import CliRunner

from wasmext_cli.docs_cmd import docs_root, topics
from wasmext_cli.main import main

ROOT = Path(__file__).resolve().parents[2]
# A markdown link's target: [text](target) or [text](target#anchor), not a URL.
LINK = re.compile(r"\]\((?!https?:|mailto:|#)([^)\s#]+)(?:#[^)\s]*)?\)")
# Links into a checkout's own tools, which the text names as such ("In a checkout, ...").
CHECKOUT_ONLY = ("wasmext_cli/_data/benchmarks/",)


def _hatch_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hatch_build_checked", ROOT / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_guides_are_listed_and_each_prints() -> None:
    listed = CliRunner().invoke(main, ["docs"])
    assert listed.exit_code == 0, listed.output
    for topic, title in (("readme", "wasmext"), ("spec", "wasmext ABI v1"),
                         ("cluster", "Extensions as services across hosts (NATS)"),
                         ("getting-started-authors", "")):
        assert re.search(rf"^  {re.escape(topic)} +{re.escape(title)}", listed.output, re.M), \
            (topic, listed.output)
    pages = topics(docs_root())
    assert len(pages) >= 20
    spec = CliRunner().invoke(main, ["docs", "SPEC.md"])
    assert spec.exit_code == 0 and spec.output == pages["spec"].read_text(encoding="utf-8")
    where = CliRunner().invoke(main, ["docs", "cluster", "--path"])
    assert where.exit_code == 0 and Path(where.output.strip()) == pages["cluster"]


def test_an_unknown_guide_is_a_usage_error_naming_the_nearest() -> None:
    result = CliRunner().invoke(main, ["docs", "clustr"])
    assert result.exit_code == 2
    assert "no guide 'clustr' (did you mean 'cluster'?)" in result.output
    odd = CliRunner().invoke(main, ["docs", "\x1b[2Jx" * 40])
    assert odd.exit_code == 2 and "\x1b" not in odd.output and len(odd.output) < 200


def test_every_relative_link_in_what_ships_resolves_to_what_ships() -> None:
    build = _hatch_build()
    shipped = {**build.sdk_files(ROOT), **build.guide_files(ROOT)}
    inside = set(shipped.values())
    assert f"{build.DATA}/abi/SPEC.md" in inside and f"{build.DATA}/README.md" in inside
    broken = []
    for source, dest in shipped.items():
        if not dest.endswith(".md"):
            continue
        for target in LINK.findall(Path(source).read_text(encoding="utf-8")):
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(dest), target))
            if resolved not in inside and not resolved.startswith(CHECKOUT_ONLY) \
                    and not any(p.startswith(resolved + "/") for p in inside):
                broken.append(f"{dest}: {target}")
    assert not broken, "\n".join(broken)
