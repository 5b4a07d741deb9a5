"""Bundles: pack, inspect and install round trip; every hostile bundle is refused with its
named error, quickly, leaving nothing installed; a healthy bundle installs afterwards."""

from __future__ import annotations

import json
import os
import stat
import struct
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lc_support import write_plugin

from wasmext import Host, HostConfig
from wasmext.errors import (
    BundleAbsolutePath,
    BundleDeviceEntry,
    BundleDigestMismatch,
    BundleDuplicateEntry,
    BundleError,
    BundleLinkEntry,
    BundlePathTraversal,
    BundleTooLarge,
    BundleTooManyEntries,
)
from wasmext.lifecycle.bundle import MANIFEST_NAME, install, pack, read_bundle
from wasmext_cli.main import main


def _bundle(tmp_path: Path, pid: str = "kb") -> Path:
    write_plugin(tmp_path / "src", pid, "v1", tools=["find"])
    out = tmp_path / f"{pid}.wxb"
    pack(tmp_path / "src" / pid, out)
    return out


def _zip(path: Path, entries: list[tuple[zipfile.ZipInfo | str, bytes]],
         compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names: we mean it
        with zipfile.ZipFile(path, "w", compression) as zf:
            for info, data in entries:
                zf.writestr(info, data)
    return path


def _entries_of(bundle: Path) -> list[tuple[zipfile.ZipInfo | str, bytes]]:
    with zipfile.ZipFile(bundle) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def _special(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    return info


def test_pack_inspect_install_round_trip(tmp_path: Path) -> None:
    out = _bundle(tmp_path)
    bundle = read_bundle(out)
    assert bundle.plugin_id == "kb" and set(bundle.files) == {"plugin.toml", "kb.wasm",
                                                               "README.md"}
    result = CliRunner().invoke(main, ["inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["id"] == "kb" and doc["signature"] == "unsigned"
    assert doc["module"]["digest"] == doc["files"]["kb.wasm"]
    dest = tmp_path / "plugins"
    folder = install(out, dest)
    assert folder == dest / "kb" and (folder / MANIFEST_NAME).is_file()
    with Host(HostConfig(data_dir=tmp_path / "data", workspace_dir=dest)) as host:
        assert host.try_call("kb", "test", None)[0].value == "v1"  # type: ignore[union-attr]
    with pytest.raises(BundleError, match="already installed"):
        install(out, dest)
    write_plugin(tmp_path / "src", "kb", "v2", tools=["find"])
    pack(tmp_path / "src" / "kb", out)
    install(out, dest, replace=True)
    with Host(HostConfig(data_dir=tmp_path / "data", workspace_dir=dest)) as host:
        assert host.try_call("kb", "test", None)[0].value == "v2"  # type: ignore[union-attr]
    assert sorted(p.name for p in dest.iterdir()) == ["kb"]


def _ten_gb_declared(tmp_path: Path) -> Path:
    path = _zip(tmp_path / "big.wxb", [(f"f{i}", b"x") for i in range(3)], zipfile.ZIP_STORED)
    raw = bytearray(path.read_bytes())
    at = 0
    while (at := raw.find(b"PK\x01\x02", at)) != -1:  # central directory: uncompressed size
        struct.pack_into("<I", raw, at + 24, 0xFFFFFFF0)  # 3 x 4 GiB declared, over 10 GB
        at += 4
    path.write_bytes(bytes(raw))
    return path


HOSTILE: dict[str, tuple[type[BundleError], Callable[[Path], Path]]] = {
    "zip-slip": (BundlePathTraversal, lambda t: _zip(t / "a.wxb", [("../evil.txt", b"x")])),
    "nested-slip": (BundlePathTraversal,
                    lambda t: _zip(t / "a.wxb", [("ok/../../evil.txt", b"x")])),
    "absolute": (BundleAbsolutePath, lambda t: _zip(t / "a.wxb", [("/tmp/evil.txt", b"x")])),
    "drive": (BundleAbsolutePath, lambda t: _zip(t / "a.wxb", [("C:evil.txt", b"x")])),
    "symlink": (BundleLinkEntry, lambda t: _zip(
        t / "a.wxb", [(_special("plugin.toml", stat.S_IFLNK | 0o777), b"/etc/passwd")])),
    "device": (BundleDeviceEntry, lambda t: _zip(
        t / "a.wxb", [(_special("tty", stat.S_IFCHR | 0o600), b"")])),
    "fifo": (BundleDeviceEntry, lambda t: _zip(
        t / "a.wxb", [(_special("pipe", stat.S_IFIFO | 0o600), b"")])),
    "duplicate": (BundleDuplicateEntry, lambda t: _zip(
        t / "a.wxb", [*_entries_of(_bundle(t)), ("kb.wasm", b"\x00asm other")])),
    "ten-gb-declared": (BundleTooLarge, _ten_gb_declared),
    "ratio-bomb": (BundleTooLarge, lambda t: _zip(t / "a.wxb", [("kb.wasm", bytes(8 << 20))])),
    "ten-thousand-entries": (BundleTooManyEntries, lambda t: _zip(
        t / "a.wxb", [(f"f{i}", b"") for i in range(10_000)], zipfile.ZIP_STORED)),
    "lying-digest": (BundleDigestMismatch, lambda t: _zip(t / "a.wxb", [
        (n, b"\0asm\x01\0\0\0" if n == "kb.wasm" else d) for n, d in _entries_of(_bundle(t))])),
    "unlisted-file": (BundleDigestMismatch, lambda t: _zip(
        t / "a.wxb", [*_entries_of(_bundle(t)), ("extra.txt", b"x")])),
    "bidi-name": (BundleError, lambda t: _zip(t / "a.wxb", [("evil\u202etxt.wasm", b"x")])),
    "hidden-name": (BundleError, lambda t: _zip(t / "a.wxb", [(".wxb-install-x", b"x")])),
    "no-manifest": (BundleDigestMismatch, lambda t: _zip(t / "a.wxb", [
        (n, d) for n, d in _entries_of(_bundle(t)) if n != MANIFEST_NAME])),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_bundles_are_refused(tmp_path: Path, case: str) -> None:
    error, make = HOSTILE[case]
    bad = make(tmp_path)
    dest = tmp_path / "plugins"
    started = time.monotonic()
    with pytest.raises(error) as caught:
        install(bad, dest)
    assert time.monotonic() - started < 5.0
    assert caught.value.describe()  # one clean line
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil.txt").exists()
    assert not dest.exists() or list(dest.iterdir()) == []  # nothing partial left behind
    result = CliRunner().invoke(main, ["install", str(bad), "--config", str(_config(tmp_path))])
    assert result.exit_code == 1 and caught.value.reason in result.output
    healthy = _bundle(tmp_path / "ok", "fine")  # the installer still works afterwards
    assert install(healthy, dest).name == "fine"


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "wasmext.toml"
    config.write_text('[host]\ndata_dir = "data"\n[plugins]\nworkspace_dir = "plugins"\n')
    return config


def test_pack_refuses_links_in_the_folder(tmp_path: Path) -> None:
    folder = write_plugin(tmp_path / "src", "kb", "v1")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    os.unlink(folder / "README.md")
    os.link(outside, folder / "README.md")  # a hard link to a file outside the folder
    with pytest.raises(BundleLinkEntry, match="hard link"):
        pack(folder, tmp_path / "kb.wxb")
    os.unlink(folder / "README.md")
    os.symlink(outside, folder / "README.md")
    with pytest.raises(BundleLinkEntry, match="symlink"):
        pack(folder, tmp_path / "kb.wxb")
    assert not (tmp_path / "kb.wxb").exists()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_are_a_bundle_error(tmp_path_factory: pytest.TempPathFactory,
                                            data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "x.wxb"
    path.write_bytes(data)
    with pytest.raises(BundleError):
        read_bundle(path)


NAME = st.text(st.sampled_from(list("ab./\\:C\0 \u202e")), min_size=0, max_size=12)


@settings(max_examples=150, deadline=None)
@given(NAME)
def test_only_plain_names_pass_the_entry_check(name: str) -> None:
    from wasmext.lifecycle.bundle import _check_entry

    try:
        info = zipfile.ZipInfo(name)
    except ValueError:
        return
    try:
        _check_entry(info, "fuzz")
    except BundleError:
        return
    from wasmext.lifecycle.bundle import PLAIN_NAME

    assert PLAIN_NAME.match(info.filename) and not info.filename.startswith(".")



def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.wxb"
    os.mkfifo(fifo)
    with pytest.raises(BundleDeviceEntry, match="not a regular file"):
        read_bundle(fifo)


def test_a_corrupt_deflate_stream_is_a_bundle_error(tmp_path: Path) -> None:
    good = _bundle(tmp_path)
    raw = bytearray(good.read_bytes())
    at = raw.find(b"PK\x03\x04") + 30 + len("plugin.toml")  # the first entry's data
    raw[at:at + 8] = b"\xff" * 8
    bad = tmp_path / "bad.wxb"
    bad.write_bytes(bytes(raw))
    with pytest.raises(BundleError):
        read_bundle(bad)


def test_install_needs_a_plugin_directory_in_the_config(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    config = tmp_path / "bare.toml"
    config.write_text('[host]\ndata_dir = "data"\n')
    result = CliRunner().invoke(main, ["install", str(bundle), "--to", "user",
                                       "--config", str(config)])
    assert result.exit_code == 2 and "user_dir" in result.output
