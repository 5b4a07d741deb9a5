"""Plugins from an OCI registry, against a real docker-registry on loopback: push then
install round trips and the plugin answers, by tag and by digest; a tampered manifest, a
modified layer, a layer over its cap (declared, served or streamed), a registry that
stalls or drips, a redirect to plain http and an unsigned bundle where signatures are
required are each refused with their named error, within their bound, leaving nothing
installed, and a healthy plugin answers afterwards."""

from __future__ import annotations

import base64
import hashlib
import json
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner
from conftest import Registry
from fake_registry import crafted_registry, stalling_server
from oci_support import fresh_name, write_plugin

from wasmext import Host, HostConfig, Plugin
from wasmext.errors import (
    BundleError,
    RegistryDigestMismatch,
    RegistryError,
    RegistryInsecure,
    RegistryTimeout,
    RegistryTooLarge,
    SignatureInvalid,
    SignatureRequired,
)
from wasmext.lifecycle import oci
from wasmext.lifecycle.bundle import pack, sign_bundle
from wasmext.lifecycle.signing import generate_key
from wasmext_cli.main import main


@pytest.fixture
def published(registry: Registry, tmp_path: Path) -> tuple[str, str]:
    """A plugin `kb` pushed to a repository of its own: (tag reference, manifest digest)."""
    ref = f"oci://{registry.address}/plugins/kb{fresh_name()}:1.0"
    digest = oci.push(write_plugin(tmp_path / "src", "kb", "from the registry"), ref)
    return ref, digest


def _answer(dest: Path, tmp_path: Path, pid: str = "kb") -> object:
    with Host(HostConfig(data_dir=tmp_path / "data", workspace_dir=dest)) as host:
        return host.try_call(pid, "test", None)[0].value  # type: ignore[union-attr]


def _manifest(registry: Registry, ref: str) -> tuple[dict[str, object], str]:
    parsed = oci.parse_reference(ref)
    response = requests.get(f"http://{registry.address}/v2/{parsed.repository}/manifests/"
                         f"{parsed.target}", headers={"Accept": oci.MANIFEST_MEDIA_TYPE})
    return json.loads(response.content), response.headers["Docker-Content-Digest"]


def _put_blob(registry: Registry, repository: str, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    started = requests.post(f"http://{registry.address}/v2/{repository}/blobs/uploads/")
    assert started.status_code == 202, started.text
    location = started.headers["Location"]
    if location.startswith("/"):
        location = f"http://{registry.address}{location}"
    response = requests.put(location, params={"digest": digest}, data=data,
                            headers={"Content-Type": "application/octet-stream"})
    assert response.status_code == 201, response.text
    return digest


def _put_manifest(registry: Registry, repository: str, tag: str, doc: object) -> str:
    body = json.dumps(doc).encode()
    response = requests.put(f"http://{registry.address}/v2/{repository}/manifests/{tag}",
                         data=body, headers={"Content-Type": oci.MANIFEST_MEDIA_TYPE})
    assert response.status_code == 201, response.text
    return "sha256:" + hashlib.sha256(body).hexdigest()


def test_push_then_install_round_trip_and_the_plugin_answers(
        published: tuple[str, str], tmp_path: Path) -> None:
    ref, digest = published
    folder, pulled = oci.install(ref, tmp_path / "plugins")
    assert folder == tmp_path / "plugins" / "kb"
    assert pulled.manifest_digest == digest
    assert _answer(tmp_path / "plugins", tmp_path) == "from the registry"


def test_the_artifact_carries_the_documented_media_types(
        registry: Registry, published: tuple[str, str]) -> None:
    doc, _ = _manifest(registry, published[0])
    assert doc["mediaType"] == oci.MANIFEST_MEDIA_TYPE
    assert doc["artifactType"] == oci.ARTIFACT_TYPE
    assert doc["config"]["mediaType"] == oci.CONFIG_MEDIA_TYPE  # type: ignore[index]
    [layer] = doc["layers"]  # type: ignore[misc]
    assert layer["mediaType"] == oci.BUNDLE_MEDIA_TYPE
    assert layer["annotations"][oci.TITLE] == "kb.wxb"


def test_a_dotted_first_component_stays_a_repository_name(registry: Registry,
                                                         tmp_path: Path) -> None:
    """oras alone would read `my.team` as a registry host and connect there."""
    ref = f"oci://{registry.address}/my.team/kb{fresh_name()}:1.0"
    oci.push(write_plugin(tmp_path / "src", "kb", "dotted"), ref)
    folder, _ = oci.install(ref, tmp_path / "plugins")
    assert folder.name == "kb"
    assert _answer(tmp_path / "plugins", tmp_path) == "dotted"


def test_install_by_digest(published: tuple[str, str], tmp_path: Path) -> None:
    ref, digest = published
    pinned = f"{ref.rsplit(':', 1)[0]}@{digest}"
    folder, pulled = oci.install(pinned, tmp_path / "plugins")
    assert pulled.manifest_digest == digest and folder.name == "kb"
    assert _answer(tmp_path / "plugins", tmp_path) == "from the registry"
    wrong = f"{ref.rsplit(':', 1)[0]}@sha256:{'0' * 64}"
    with pytest.raises(RegistryError, match="not found"):
        oci.install(wrong, tmp_path / "other")


def test_recorded_approvals_cover_only_the_module_they_were_given_to(
        registry: Registry, tmp_path: Path) -> None:
    """An install from a registry grants nothing; a grant recorded for one version is
    withheld from the next one installed over it, as for any folder."""
    repository = f"oci://{registry.address}/plugins/approved{fresh_name()}"
    oci.push(write_plugin(tmp_path / "v1", "kb", "version one"), f"{repository}:1")
    oci.push(write_plugin(tmp_path / "v2", "kb", "version two"), f"{repository}:2")
    config = ["--config", str(_config(tmp_path))]
    runner = CliRunner()
    for args in (["install", f"{repository}:1"], ["grant", "kb", "state", "--by", "ops"],
                 ["install", f"{repository}:2", "--replace"]):
        result = runner.invoke(main, [*args, *config])
        assert result.exit_code == 0, result.output
    grants = runner.invoke(main, ["grants", "--json", *config])
    [row] = json.loads(grants.output)
    assert row["capability"] == "state" and row["status"] == "withheld (module changed)"
    assert _answer(tmp_path / "plugins", tmp_path) == "version two"


def test_tampered_manifest_is_refused(registry: Registry, published: tuple[str, str],
                                      tmp_path: Path, healthy: Plugin) -> None:
    ref, digest = published
    stored = registry.blob(digest)
    original = stored.read_bytes()
    assert b'"0.1.0"' in original
    stored.write_bytes(original.replace(b'"0.1.0"', b'"9.9.9"'))  # same length, new bytes
    pinned = f"{ref.rsplit(':', 1)[0]}@{digest}"
    for reference in (ref, pinned):
        started = time.monotonic()
        with pytest.raises(RegistryDigestMismatch, match="manifest"):
            oci.install(reference, tmp_path / "plugins")
        assert time.monotonic() - started < 3
    assert not (tmp_path / "plugins" / "kb").exists()
    assert healthy.call("test").value == "alive"


def test_modified_layer_blob_is_refused(registry: Registry, published: tuple[str, str],
                                        tmp_path: Path, healthy: Plugin) -> None:
    ref, _ = published
    doc, _ = _manifest(registry, ref)
    layer = registry.blob(doc["layers"][0]["digest"])  # type: ignore[index]
    data = bytearray(layer.read_bytes())
    data[len(data) // 2] ^= 0xFF
    layer.write_bytes(bytes(data))
    with pytest.raises(RegistryDigestMismatch, match="bundle layer"):
        oci.install(ref, tmp_path / "plugins")
    assert not (tmp_path / "plugins" / "kb").exists()
    assert healthy.call("test").value == "alive"


def test_layer_declared_huge_is_refused_without_downloading(
        registry: Registry, published: tuple[str, str], tmp_path: Path,
        healthy: Plugin) -> None:
    ref, _ = published
    doc, _ = _manifest(registry, ref)
    doc["layers"][0]["size"] = 2**40  # type: ignore[index]
    repository = oci.parse_reference(ref).repository
    _put_manifest(registry, repository, "huge", doc)
    started = time.monotonic()
    with pytest.raises(RegistryTooLarge, match="not downloaded"):
        oci.install(f"oci://{registry.address}/{repository}:huge", tmp_path / "plugins")
    assert time.monotonic() - started < 3
    assert not (tmp_path / "plugins").exists() or not any((tmp_path / "plugins").iterdir())
    assert healthy.call("test").value == "alive"


def test_layer_larger_than_its_descriptor_is_refused_before_reading(
        registry: Registry, published: tuple[str, str], tmp_path: Path,
        healthy: Plugin) -> None:
    """The registry serves 8 MiB for a descriptor that says 1 KiB: its Content-Length is
    refused before the body is read; the memory used stays far below the blob."""
    ref, _ = published
    doc, _ = _manifest(registry, ref)
    repository = oci.parse_reference(ref).repository
    big = _put_blob(registry, repository, b"\0" * (8 * 2**20))
    doc["layers"][0].update(digest=big, size=1024)  # type: ignore[index]
    _put_manifest(registry, repository, "liar", doc)
    tracemalloc.start()
    try:
        started = time.monotonic()
        with pytest.raises(RegistryTooLarge, match="over 1024"):
            oci.install(f"oci://{registry.address}/{repository}:liar", tmp_path / "plugins")
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert elapsed < 3 and peak < 2 * 2**20
    assert healthy.call("test").value == "alive"


def test_layer_over_the_cap_is_refused(published: tuple[str, str], tmp_path: Path) -> None:
    with pytest.raises(RegistryTooLarge, match="over 100"):
        oci.install(published[0], tmp_path / "plugins", max_layer_bytes=100)


def _crafted_manifest(size: int, digest: str = "sha256:" + "a" * 64) -> bytes:
    config = b"{}"
    return json.dumps({
        "schemaVersion": 2, "mediaType": oci.MANIFEST_MEDIA_TYPE,
        "artifactType": oci.ARTIFACT_TYPE,
        "config": {"mediaType": oci.CONFIG_MEDIA_TYPE, "size": len(config),
                   "digest": "sha256:" + hashlib.sha256(config).hexdigest()},
        "layers": [{"mediaType": oci.BUNDLE_MEDIA_TYPE, "size": size,
                    "digest": digest}]}).encode()


def test_endless_layer_stream_is_cut_at_its_declared_size(tmp_path: Path,
                                                          healthy: Plugin) -> None:
    """No Content-Length, chunked without end: reading stops at the declared size."""
    with crafted_registry() as fake:
        fake.manifest = _crafted_manifest(4096)
        fake.blob_mode = "endless"
        port = fake.server_address[1]
        started = time.monotonic()
        with pytest.raises(RegistryTooLarge, match="stopped reading"):
            oci.install(f"oci://127.0.0.1:{port}/plugins/kb:1", tmp_path / "plugins",
                        deadline_s=5)
        assert time.monotonic() - started < 3
    assert healthy.call("test").value == "alive"


def test_endless_redirect_body_is_cut(tmp_path: Path, healthy: Plugin) -> None:
    """The body of a redirect (which requests reads whole before following) is capped,
    as is every body but the layer's."""
    with crafted_registry() as fake:
        fake.manifest = _crafted_manifest(4096)
        fake.blob_mode = "redirect_endless"
        port = fake.server_address[1]
        tracemalloc.start()
        try:
            started = time.monotonic()
            with pytest.raises(RegistryTooLarge, match="an answer"):
                oci.install(f"oci://127.0.0.1:{port}/plugins/kb:1", tmp_path / "plugins",
                            deadline_s=5)
            elapsed = time.monotonic() - started
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert elapsed < 3 and peak < 8 * oci.MAX_ANSWER_BYTES
    assert healthy.call("test").value == "alive"


def test_stalling_registry_times_out_within_the_deadline(tmp_path: Path,
                                                          healthy: Plugin) -> None:
    with stalling_server() as port:
        started = time.monotonic()
        with pytest.raises(RegistryTimeout, match=r"within 0\.5 s"):
            oci.install(f"oci://127.0.0.1:{port}/plugins/kb:1", tmp_path / "plugins",
                        deadline_s=0.5)
        assert time.monotonic() - started < 3
    assert healthy.call("test").value == "alive"


def test_dripping_layer_times_out_within_the_deadline(tmp_path: Path,
                                                      healthy: Plugin) -> None:
    """Every read gets a byte in time; the whole exchange still ends at the deadline."""
    with crafted_registry() as fake:
        fake.manifest = _crafted_manifest(1000)
        fake.blob_mode = "drip"
        port = fake.server_address[1]
        started = time.monotonic()
        with pytest.raises(RegistryTimeout):
            oci.install(f"oci://127.0.0.1:{port}/plugins/kb:1", tmp_path / "plugins",
                        deadline_s=1.0)
        assert time.monotonic() - started < 3
        assert 0 < fake.sent < 1000
    assert healthy.call("test").value == "alive"


def test_layer_stalling_midway_times_out_within_the_deadline(tmp_path: Path,
                                                             healthy: Plugin) -> None:
    """Headers and a few bytes, then silence: the read waits only what the deadline has
    left, not a fresh timeout of its own."""
    with crafted_registry() as fake:
        fake.manifest = _crafted_manifest(1000)
        fake.blob_mode = "stall"
        port = fake.server_address[1]
        started = time.monotonic()
        with pytest.raises(RegistryTimeout):
            oci.install(f"oci://127.0.0.1:{port}/plugins/kb:1", tmp_path / "plugins",
                        deadline_s=1.0)
        assert time.monotonic() - started < 3
        assert fake.sent == 10
    assert healthy.call("test").value == "alive"


def test_manifest_over_its_cap_or_encoded_is_refused(tmp_path: Path,
                                                      healthy: Plugin) -> None:
    with crafted_registry() as fake:
        port = fake.server_address[1]
        ref = f"oci://127.0.0.1:{port}/plugins/kb:1"
        fake.manifest = json.dumps({"pad": "x" * oci.MAX_MANIFEST_BYTES}).encode()
        with pytest.raises(RegistryTooLarge, match=f"over {oci.MAX_MANIFEST_BYTES}"):
            oci.install(ref, tmp_path / "plugins")
        fake.manifest = _crafted_manifest(1000)
        fake.manifest_headers = {"Content-Encoding": "gzip"}  # would be inflated unbounded
        with pytest.raises(RegistryError, match="encoded"):
            oci.install(ref, tmp_path / "plugins")
    assert healthy.call("test").value == "alive"


def test_push_to_a_stalling_registry_times_out(tmp_path: Path) -> None:
    source = write_plugin(tmp_path / "src", "kb", "never published")
    with stalling_server() as port:
        started = time.monotonic()
        with pytest.raises(RegistryTimeout):
            oci.push(source, f"oci://127.0.0.1:{port}/plugins/kb:1", deadline_s=0.5)
        assert time.monotonic() - started < 3


def test_push_refuses_what_an_install_would(registry: Registry, tmp_path: Path) -> None:
    broken = tmp_path / "broken.wxb"
    broken.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(BundleError):
        oci.push(broken, f"oci://{registry.address}/plugins/broken:1")
    with pytest.raises(RegistryError, match="push to a tag"):
        oci.push(broken, f"oci://{registry.address}/plugins/broken@sha256:{'0' * 64}")


def test_redirect_to_plain_http_off_loopback_is_refused(tmp_path: Path) -> None:
    with crafted_registry() as fake:
        fake.manifest = _crafted_manifest(1000)
        fake.blob_mode = "redirect"
        port = fake.server_address[1]
        started = time.monotonic()
        with pytest.raises(RegistryInsecure, match=r"192\.0\.2\.1"):
            oci.install(f"oci://127.0.0.1:{port}/plugins/kb:1", tmp_path / "plugins")
        assert time.monotonic() - started < 3


def test_not_a_plugin_artifact_is_refused(registry: Registry, published: tuple[str, str],
                                          tmp_path: Path) -> None:
    ref, _ = published
    doc, _ = _manifest(registry, ref)
    doc["layers"][0]["mediaType"] = "application/vnd.oci.image.layer.v1.tar"  # type: ignore[index]
    repository = oci.parse_reference(ref).repository
    _put_manifest(registry, repository, "image", doc)
    with pytest.raises(RegistryError, match="not a wasmext plugin artifact"):
        oci.install(f"oci://{registry.address}/{repository}:image", tmp_path / "plugins")


def test_signatures_required_unsigned_refused_signed_installs(
        registry: Registry, tmp_path: Path, healthy: Plugin) -> None:
    repository = f"plugins/signed{fresh_name()}"
    source = write_plugin(tmp_path / "src", "kb", "signed")
    bundle = tmp_path / "kb.wxb"
    pack(source, bundle)
    oci.push(bundle, f"oci://{registry.address}/{repository}:unsigned")
    public = generate_key(tmp_path / "key.pem")
    sign_bundle(bundle, tmp_path / "key.pem")
    oci.push(bundle, f"oci://{registry.address}/{repository}:signed")
    dest = tmp_path / "plugins"
    with pytest.raises(SignatureRequired):
        oci.install(f"oci://{registry.address}/{repository}:unsigned", dest,
                    trusted=(public,), require_signature=True)
    other = generate_key(tmp_path / "other.pem")
    with pytest.raises(SignatureInvalid):
        oci.install(f"oci://{registry.address}/{repository}:signed", dest,
                    trusted=(other,), require_signature=True)
    assert not (dest / "kb").exists()
    folder, _ = oci.install(f"oci://{registry.address}/{repository}:signed", dest,
                            trusted=(public,), require_signature=True)
    assert (folder / "WXB-SIGNATURE.json").is_file()
    assert healthy.call("test").value == "alive"


@pytest.mark.parametrize("text", [
    "https://127.0.0.1:5000/plugins/kb:1",           # not oci://
    "oci://user:secret@127.0.0.1:5000/plugins/kb:1",  # credentials in the reference
    "oci://127.0.0.1:5000/Plugins/KB:1",              # uppercase name
    "oci://127.0.0.1:5000/plugins/../kb:1",           # a climbing component
    "oci://127.0.0.1:5000/plugins/kb@sha256:abc",     # a short digest
    "oci://127.0.0.1:5000/plugins/kb:bad tag",
    "oci://127.0.0.1:5000/",
])
def test_bad_references_are_refused(text: str) -> None:
    with pytest.raises(RegistryError) as caught:
        oci.parse_reference(text)
    assert "secret" not in caught.value.describe()


@pytest.mark.parametrize("text", [
    "oci://robot:hunter2/secret@127.0.0.1:5000/plugins/kb:1",   # a '/' in the password
    "oci://robot:hunter2 secret@127.0.0.1:5000/plugins/kb:1",   # a space
    "oci://robot:hunter2@secret@127.0.0.1:5000/plugins/kb:1",   # an '@'
    "oci://robot:hunter2/secret@127.0.0.1:5000/kb@sha256:abc",  # and a bad digest
    "https://robot:hunter2/secret@127.0.0.1:5000/plugins/kb:1",  # not even oci://
])
def test_a_login_in_a_reference_is_never_shown_whatever_its_characters(
        text: str, tmp_path: Path) -> None:
    with pytest.raises(RegistryError) as caught:
        oci.parse_reference(text)
    message = caught.value.describe()
    assert "hunter2" not in message and "secret" not in message
    assert "***@" in message or message.startswith("https://")
    started = time.monotonic()
    result = CliRunner().invoke(main, ["install", text, "--config",
                                       str(_config(tmp_path))])
    assert time.monotonic() - started < 10
    assert result.exit_code != 0 and ("***@" in result.output or "https://..." in result.output)
    assert "hunter2" not in result.output and "secret" not in result.output


def test_references_parse() -> None:
    ref = oci.parse_reference("oci://localhost:5000/team/plugins/kb:1.2.0")
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == \
        ("localhost:5000", "team/plugins/kb", "1.2.0", None)
    assert ref.loopback and str(ref) == "oci://localhost:5000/team/plugins/kb:1.2.0"
    pinned = oci.parse_reference(f"oci://ghcr.example/kb@sha256:{'ab' * 32}")
    assert pinned.tag is None and pinned.target == f"sha256:{'ab' * 32}"
    assert not pinned.loopback
    assert oci.parse_reference("oci://[::1]:5000/kb").loopback
    both = oci.parse_reference(f"oci://localhost:5000/kb:1.0@sha256:{'cd' * 32}")
    assert both.tag == "1.0" and both.target == f"sha256:{'cd' * 32}"


def test_cli_push_and_install_never_print_credentials(
        registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORAS_USER", "robot")
    monkeypatch.setenv("ORAS_PASS", "hunter2-secret")
    _config(tmp_path)
    ref = f"oci://{registry.address}/plugins/cli{fresh_name()}:1.0"
    source = write_plugin(tmp_path / "src", "kb", "via the cli")
    runner = CliRunner()
    pushed = runner.invoke(main, ["push", str(source), ref])
    assert pushed.exit_code == 0, pushed.output
    assert "sha256:" in pushed.output
    config = ["--config", str(tmp_path / "wasmext.toml")]
    installed = runner.invoke(main, ["install", ref, *config])
    assert installed.exit_code == 0, installed.output
    assert _answer(tmp_path / "plugins", tmp_path) == "via the cli"
    missing = runner.invoke(main, ["install", ref.replace(":1.0", ":nope"), *config])
    assert missing.exit_code != 0 and "not found" in missing.output
    for result in (pushed, installed, missing):
        assert "hunter2" not in result.output and "robot" not in result.output


@pytest.fixture
def behind_login(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A registry that wants a Basic login (robot:hunter2-secret) and serves kb's bundle."""
    bundle = tmp_path / "kb.wxb"
    pack(write_plugin(tmp_path / "src", "kb", "behind a login"), bundle)
    data = bundle.read_bytes()
    with crafted_registry() as fake:
        fake.login = "robot:hunter2-secret"
        fake.blob, fake.blob_mode = data, "serve"
        fake.manifest = _crafted_manifest(len(data), "sha256:" + hashlib.sha256(data).hexdigest())
        yield f"oci://127.0.0.1:{fake.server_address[1]}/plugins/kb:1", tmp_path / "plugins"


def test_bearer_token_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Docker token protocol: the login buys a token at the realm, then every request
    carries the token, never the password."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    monkeypatch.setenv("ORAS_USER", "robot")
    monkeypatch.setenv("ORAS_PASS", "hunter2-secret")
    bundle = tmp_path / "kb.wxb"
    pack(write_plugin(tmp_path / "src", "kb", "behind a token"), bundle)
    data = bundle.read_bytes()
    with crafted_registry() as fake:
        fake.token_login = "robot:hunter2-secret"
        fake.blob, fake.blob_mode = data, "serve"
        fake.manifest = _crafted_manifest(len(data), "sha256:" + hashlib.sha256(data).hexdigest())
        folder, _ = oci.install(f"oci://127.0.0.1:{fake.server_address[1]}/plugins/kb:1",
                                tmp_path / "plugins")
    assert folder.name == "kb"
    assert "Bearer t0k-granted" in fake.authorizations


def test_credentials_from_the_environment(behind_login: tuple[str, Path],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ref, dest = behind_login
    monkeypatch.setenv("ORAS_USER", "robot")
    monkeypatch.setenv("ORAS_PASS", "hunter2-secret")
    folder, _ = oci.install(ref, dest)
    assert folder.name == "kb"


def test_credentials_from_the_docker_config(behind_login: tuple[str, Path], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ref, dest = behind_login
    monkeypatch.delenv("ORAS_USER", raising=False)
    monkeypatch.delenv("ORAS_PASS", raising=False)
    config = tmp_path / "docker"
    config.mkdir()
    auth = base64.b64encode(b"robot:hunter2-secret").decode()
    (config / "config.json").write_text(json.dumps(
        {"auths": {oci.parse_reference(ref).registry: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    folder, _ = oci.install(ref, dest)
    assert folder.name == "kb"


def test_missing_or_wrong_credentials_are_named_never_printed(
        behind_login: tuple[str, Path], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    ref, dest = behind_login
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    monkeypatch.delenv("ORAS_USER", raising=False)
    monkeypatch.delenv("ORAS_PASS", raising=False)
    with pytest.raises(RegistryError, match="asks for a login"):
        oci.install(ref, dest)
    monkeypatch.setenv("ORAS_USER", "robot")
    monkeypatch.setenv("ORAS_PASS", "wrong-hunter3")
    with pytest.raises(RegistryError, match="unauthorized") as caught:
        oci.install(ref, dest)
    text = caught.value.describe() + repr(caught.value.args)
    assert "hunter3" not in text and "leaky text" not in text
    result = CliRunner().invoke(main, ["install", ref, "--config", str(_config(tmp_path))])
    assert result.exit_code != 0 and "unauthorized" in result.output
    assert "hunter3" not in result.output and "leaky text" not in result.output
    assert not (dest / "kb").exists()


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "wasmext.toml"
    path.write_text(f'[host]\ndata_dir = "{tmp_path / "data"}"\n'
                    f'[plugins]\nworkspace_dir = "{tmp_path / "plugins"}"\n')
    return path


@pytest.mark.parametrize("login", ["login", "token_login"])
def test_a_layer_redirected_to_another_server_never_carries_the_login(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, login: str, healthy: Plugin) -> None:
    """A registry sends the layer request elsewhere (as a CDN redirect looks): that server
    gets neither the Basic login nor the registry's Bearer token."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    monkeypatch.setenv("ORAS_USER", "robot")
    monkeypatch.setenv("ORAS_PASS", "hunter2-secret")
    bundle = tmp_path / "kb.wxb"
    pack(write_plugin(tmp_path / "src", "kb", "from elsewhere"), bundle)
    data = bundle.read_bytes()
    manifest = _crafted_manifest(len(data), "sha256:" + hashlib.sha256(data).hexdigest())
    with crafted_registry() as registry, crafted_registry() as elsewhere:
        setattr(registry, login, "robot:hunter2-secret")
        registry.manifest, registry.blob_mode = manifest, "elsewhere"
        elsewhere.blob, elsewhere.blob_mode = data, "serve"
        registry.redirect_to = f"http://localhost:{elsewhere.server_address[1]}/v2/cdn/blobs/kb"
        started = time.monotonic()
        folder, _ = oci.install(f"oci://127.0.0.1:{registry.server_address[1]}/plugins/kb:1",
                                tmp_path / "plugins")
        assert time.monotonic() - started < 10
    assert folder.name == "kb"
    assert any(a for a in registry.authorizations)  # the registry itself got the login
    assert elsewhere.authorizations == [""]
    assert healthy.call("test").value == "alive"


def test_a_bundle_whose_signature_does_not_verify_is_not_pushed(
        tmp_path: Path, healthy: Plugin) -> None:
    """Push checks what install checks: a signature broken after signing would pass
    `read_bundle` and then fail every install that verifies signatures."""
    import zipfile

    bundle = tmp_path / "kb.wxb"
    pack(write_plugin(tmp_path / "src", "kb", "signed"), bundle)
    generate_key(tmp_path / "key.pem")
    sign_bundle(bundle, tmp_path / "key.pem")
    with zipfile.ZipFile(bundle) as zf:
        entries = {i.filename: zf.read(i) for i in zf.infolist()}
    sig = json.loads(entries["WXB-SIGNATURE.json"])
    sig["signature"] = base64.b64encode(b"\0" * 64).decode()
    entries["WXB-SIGNATURE.json"] = json.dumps(sig).encode()
    with zipfile.ZipFile(bundle, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    with stalling_server() as port:  # a push that got past the checks would hang here
        started = time.monotonic()
        with pytest.raises(SignatureInvalid):
            oci.push(bundle, f"oci://127.0.0.1:{port}/plugins/kb:1", deadline_s=30)
        assert time.monotonic() - started < 5
    assert healthy.call("test").value == "alive"
