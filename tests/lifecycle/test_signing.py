"""Ed25519 signatures: with `require_signature = true` an unsigned or wrongly signed
bundle is refused at install and at load; a signature never grants a capability."""

from __future__ import annotations

import base64
import json
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from lc_support import module, write_plugin

from wasmext import Host, load_config
from wasmext.errors import BundleDigestMismatch, SignatureInvalid, SignatureRequired
from wasmext.files import atomic_write
from wasmext.lifecycle.bundle import SIGNATURE_NAME, install, pack, read_bundle, sign_bundle
from wasmext.lifecycle.signing import generate_key, is_public_key
from wasmext_cli.main import main


def _config(tmp_path: Path, keys: list[str], require: bool = True) -> Path:
    config = tmp_path / "wasmext.toml"
    config.write_text(f"""[host]
data_dir = "data"
[plugins]
workspace_dir = "plugins"
[trust]
require_signature = {str(require).lower()}
keys = {json.dumps(keys)}
""")
    return config


def _bundle(tmp_path: Path, pid: str = "kb") -> Path:
    write_plugin(tmp_path / "src", pid, "v1", tools=["find"])
    out = tmp_path / f"{pid}.wxb"
    pack(tmp_path / "src" / pid, out)
    return out


def test_signed_bundles_install_and_load_unsigned_and_wrong_keys_do_not(tmp_path: Path
                                                                       ) -> None:
    trusted = generate_key(tmp_path / "trusted.pem")
    other = generate_key(tmp_path / "other.pem")
    assert is_public_key(trusted) and trusted != other
    assert (tmp_path / "trusted.pem").stat().st_mode & 0o777 == 0o600
    cfg = load_config(_config(tmp_path, [trusted]))
    dest = tmp_path / "plugins"

    unsigned = _bundle(tmp_path)
    with pytest.raises(SignatureRequired):
        install(unsigned, dest, trusted=cfg.trusted_keys, require_signature=True)
    wrong = _bundle(tmp_path / "w")
    sign_bundle(wrong, tmp_path / "other.pem")
    with pytest.raises(SignatureInvalid, match="does not trust"):
        install(wrong, dest, trusted=cfg.trusted_keys, require_signature=True)
    assert not dest.exists() or list(dest.iterdir()) == []

    good = _bundle(tmp_path / "g")
    assert sign_bundle(good, tmp_path / "trusted.pem") == trusted
    assert read_bundle(good).signed_by == trusted
    folder = install(good, dest, trusted=cfg.trusted_keys, require_signature=True)
    with Host(cfg) as host:
        assert set(host.plugins) == {"kb"}
        assert host.plugins["kb"].plugin.grants == frozenset()  # signed, yet granted nothing

    # A folder copied in by hand, and an installed module swapped afterwards: not loaded.
    write_plugin(dest, "hand", "v1")
    atomic_write(folder / "kb.wasm", module("v2"))
    with Host(cfg) as host:
        assert host.plugins == {}
        errors = {e.plugin_id: e for e in host.load_errors}
        assert isinstance(errors["hand"], SignatureRequired)
        assert isinstance(errors["kb"], BundleDigestMismatch)


def test_a_tampered_signature_is_refused(tmp_path: Path) -> None:
    key = generate_key(tmp_path / "k.pem")
    good = _bundle(tmp_path)
    sign_bundle(good, tmp_path / "k.pem")
    with zipfile.ZipFile(good) as zf:
        entries = {i.filename: zf.read(i) for i in zf.infolist()}
    sig = json.loads(entries[SIGNATURE_NAME])
    sig["signature"] = sig["signature"][:-4] + ("AAA=" if sig["signature"][-4:] != "AAA=" else
                                                "BBB=")
    entries[SIGNATURE_NAME] = json.dumps(sig).encode()
    with zipfile.ZipFile(good, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    with pytest.raises(SignatureInvalid, match="does not match"):
        install(good, tmp_path / "plugins", trusted=(key,), require_signature=True)


def test_keygen_sign_and_install_from_the_command_line(tmp_path: Path) -> None:
    runner = CliRunner()
    made = runner.invoke(main, ["keygen", "-o", str(tmp_path / "k.pem")])
    assert made.exit_code == 0, made.output
    public = made.output.strip()
    config = _config(tmp_path, [public])
    bundle = _bundle(tmp_path)
    refused = runner.invoke(main, ["install", str(bundle), "--config", str(config)])
    assert refused.exit_code == 1 and "signature required" in refused.output
    signed = runner.invoke(main, ["sign", str(bundle), "--key", str(tmp_path / "k.pem")])
    assert signed.exit_code == 0 and public in signed.output
    done = runner.invoke(main, ["install", str(bundle), "--config", str(config)])
    assert done.exit_code == 0, done.output
    again = runner.invoke(main, ["keygen", "-o", str(tmp_path / "k.pem")])
    assert again.exit_code == 2  # never overwrites a key


def test_trust_keys_are_validated(tmp_path: Path) -> None:
    from wasmext.errors import ConfigError

    with pytest.raises(ConfigError, match=r"trust\.keys"):
        load_config(_config(tmp_path, ["ed25519:not-base64!"]))


@given(st.text(max_size=80) | st.binary(max_size=48).map(
    lambda b: "ed25519:" + base64.b64encode(b).decode()))
def test_public_key_text_is_parsed_strictly(text: str) -> None:
    ok = is_public_key(text)
    if ok:
        assert text.startswith("ed25519:")
        assert len(base64.b64decode(text[8:], validate=True)) == 32


def test_files_swapped_after_the_signature_check_are_refused(tmp_path: Path) -> None:
    from dataclasses import replace

    from wasmext.errors import LoadError
    from wasmext.lifecycle.bundle import verify_folder
    from wasmext.manifest import load_folder

    key = generate_key(tmp_path / "k.pem")
    bundle = _bundle(tmp_path)
    sign_bundle(bundle, tmp_path / "k.pem")
    folder = install(bundle, tmp_path / "plugins", trusted=(key,), require_signature=True)
    manifest = load_folder(folder)
    signed, checked = verify_folder(folder, manifest, (key,))
    assert signed.startswith("sha256:") and checked == (folder / "kb.wasm").read_bytes()
    # The manifest the host parsed is not the signed file's (swapped in between):
    with pytest.raises(BundleDigestMismatch, match="changed while"):
        verify_folder(folder, replace(manifest, priority=99), (key,))
    # The module compiled is not the signed one (swapped after the check):
    cfg = load_config(_config(tmp_path, [key]))
    with Host(cfg) as host:
        assert set(host.plugins) == {"kb"}
        host.unload("kb")
        atomic_write(folder / "kb.wasm", module("v2"))
        with pytest.raises(LoadError, match="not the one expected"):
            host.add(folder, digest=signed)
        assert "kb" not in host.plugins
