"""Plugins from OCI registries: `oci://REGISTRY/NAME:TAG` or `oci://REGISTRY/NAME@sha256:...`.

A plugin is published as an OCI artifact holding its `.wxb` bundle unchanged:

    manifest  application/vnd.oci.image.manifest.v1+json
              artifactType application/vnd.wasmext.plugin.v1
    config    application/vnd.wasmext.plugin.config.v1+json
              {"format": 1, "id": ..., "version": ...}: for people and tools listing
              the registry; an install never trusts it, it reads the bundle
    layer     exactly one, application/vnd.wasmext.bundle.v1+zip: the bundle's bytes,
              titled `<id>.wxb` (org.opencontainers.image.title)

The bundle carries its own digest manifest and (optional) Ed25519 signature, so an
install from a registry is a `.wxb` install (`wasmext.lifecycle.bundle.install`) with
every check of it: entries, sizes, digests, the signature the host requires, the
folder rules; recorded approvals pin module and manifest as for any folder.

Everything the registry sends is hostile. The manifest is capped in size (declared
and streamed) and must hash to the digest asked for (`@sha256:`) or, for a tag, to
the digest the registry names for it; its layer's descriptor size is checked
against the cap before a byte of the layer is fetched, the streamed layer is cut
at its declared size, and its sha256 must match; every other body (a token, an
upload's reply, a redirect's own body) is read capped at 1 MiB, never whole.
One deadline covers the whole exchange: every connect and every read waits at
most what remains of it, so a registry that stalls or drips fails with
`RegistryTimeout` within the bound. The oras library speaks the protocol
(references, authentication, uploads); its retry-with-sleeps is bypassed, the
deadline being ours. Plain http is used for a
loopback registry or with `insecure=True` (`--insecure`), https otherwise.
Credentials come from the Docker config (`$DOCKER_CONFIG/config.json` or
`~/.docker/config.json`, its credential helpers included) or `ORAS_USER` /
`ORAS_PASS`; no message ever carries them, nor a registry's own error text.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookiejar import DefaultCookiePolicy
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import oras.auth
import oras.container
import oras.provider
import requests
import urllib3.exceptions

from wasmext._toml import ConfigTextError, parse_text
from wasmext.errors import (
    BundleError,
    RegistryDigestMismatch,
    RegistryError,
    RegistryInsecure,
    RegistryTimeout,
    RegistryTooLarge,
)
from wasmext.files import atomic_open
from wasmext.lifecycle import bundle as bundles
from wasmext.text import clean

__all__ = ["ARTIFACT_TYPE", "BUNDLE_MEDIA_TYPE", "CONFIG_MEDIA_TYPE", "MANIFEST_MEDIA_TYPE",
           "Pulled", "Reference", "install", "parse_reference", "pull", "push"]

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
ARTIFACT_TYPE = "application/vnd.wasmext.plugin.v1"
CONFIG_MEDIA_TYPE = "application/vnd.wasmext.plugin.config.v1+json"
BUNDLE_MEDIA_TYPE = "application/vnd.wasmext.bundle.v1+zip"
TITLE = "org.opencontainers.image.title"

MAX_MANIFEST_BYTES = 64 * 1024  # ours are under 1 KiB; the OCI spec's floor is 4 MiB
MAX_LAYER_BYTES = bundles.MAX_ARCHIVE_BYTES  # what a .wxb install accepts anyway
MAX_ANSWER_BYTES = 1024 * 1024  # any other body: a token, an upload's reply, an error
DEADLINE_S = 60.0
CHUNK = 64 * 1024
MAX_REDIRECTS = 5

_HOST = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}))(?::\d{1,5})?$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class Reference:
    """A parsed `oci://REGISTRY/NAME:TAG` or `oci://REGISTRY/NAME@sha256:...`."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def target(self) -> str:
        """The digest when pinned, otherwise the tag: what the manifest URL names."""
        return self.digest or self.tag or "latest"

    @property
    def loopback(self) -> bool:
        """Whether the registry is on this machine (plain http is allowed there)."""
        host = self.registry.rsplit(":", 1)[0] if not self.registry.startswith("[") \
            else self.registry[1:].split("]", 1)[0]
        return _is_loopback(host)

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        pin = f"@{self.digest}" if self.digest else ""
        return f"oci://{self.registry}/{self.repository}{tag}{pin}"


def _is_loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host or "").is_loopback
    except ValueError:
        return False


def parse_reference(text: str) -> Reference:
    """Parse an `oci://` reference strictly; RegistryError names what is wrong."""
    shown = _shown(text)
    if not text.startswith("oci://"):
        raise RegistryError(f"{shown}: not an oci:// reference")
    rest = text[len("oci://"):]
    registry, _, path = rest.partition("/")
    if not _HOST.match(registry) or "@" in registry:
        raise RegistryError(f"{shown}: the registry must be HOST[:PORT] (no credentials in "
                            f"the reference: use the Docker config or ORAS_USER/ORAS_PASS)")
    digest = tag = None
    if "@" in path:
        path, _, digest = path.partition("@")
        if not _DIGEST.match(digest):
            raise RegistryError(f"{shown}: a digest is sha256: and 64 lowercase hex digits")
    if ":" in path.rsplit("/", 1)[-1]:  # NAME:TAG@sha256:... is pinned by the digest
        path, _, tag = path.rpartition(":")
        if not _TAG.match(tag):
            raise RegistryError(f"{shown}: not a valid tag")
    if not _REPOSITORY.match(path) or len(path) > 255:
        raise RegistryError(f"{shown}: the name must be lowercase path components "
                            f"(letters, digits, '.', '_', '-')")
    return Reference(registry, path, tag or (None if digest else "latest"), digest)


def _shown(text: str) -> str:
    """A reference for a message, any login in it hidden: a password may hold '/', ' ' or
    '@' (a URL's userinfo rule would stop at them), so everything before the last '@'
    that does not pin a digest is."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    cut = max((at for at in range(len(rest)) if rest[at] == "@"
               and not rest.startswith("sha256:", at + 1)), default=-1)
    if cut >= 0:
        rest = "***" + rest[cut:]
    return clean(f"{scheme}{sep}{rest}", 160)


@dataclass(frozen=True)
class Pulled:
    """A bundle fetched from a registry: where it was saved and the digests checked (after
    `install`, `path` names the temporary copy, already removed)."""

    path: Path
    manifest_digest: str
    layer_digest: str
    size: int


class _Clock:
    """One deadline for a whole registry exchange."""

    def __init__(self, seconds: float, ref: Reference) -> None:
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self.ref = ref

    def remaining(self) -> float:
        """Seconds left; RegistryTimeout when none are."""
        left = self.ends - time.monotonic()
        if left <= 0:
            raise self.expired()
        return left

    def expired(self) -> RegistryTimeout:
        """The error for this exchange running out of time."""
        return RegistryTimeout(f"{self.ref}: the registry did not finish within "
                               f"{self.seconds:g} s")


class _DeadlineSession(requests.Session):
    """Every request (the library's and its auth backend's) waits at most the time left."""

    def __init__(self, clock: _Clock, insecure: bool) -> None:
        super().__init__()
        self.clock = clock
        self.insecure = insecure
        self.max_redirects = MAX_REDIRECTS
        # Registries may set cookies to detect browsers; a client keeps none.
        self.cookies.set_policy(DefaultCookiePolicy(allowed_domains=[]))
        self.hooks["response"].append(self._cap_redirect)

    def request(self, method: str | bytes, url: str | bytes,
                *args: Any, **kwargs: Any) -> requests.Response:
        """Ask for the bytes unencoded: nothing the registry sends is ever inflated."""
        headers = dict(kwargs.get("headers") or {})
        headers["Accept-Encoding"] = "identity"  # never inflate what the registry sends
        kwargs["headers"] = headers
        verb = method.decode() if isinstance(method, bytes) else method
        return super().request(verb, url, *args, **kwargs)

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        """Refuse plain http off loopback (a redirect included) unless --insecure."""
        parts = urlsplit(request.url or "")
        if parts.scheme != "https" and not self.insecure and not _is_loopback(parts.hostname):
            raise RegistryInsecure(f"{self.clock.ref}: plain http to "
                                   f"{clean(parts.hostname or '?', 80)} (off loopback) "
                                   f"needs --insecure")
        left = self.clock.remaining()
        kwargs["timeout"] = (left, left)
        wanted_stream = kwargs.get("stream", False)
        kwargs["stream"] = True
        response = super().send(request, **kwargs)
        if not wanted_stream:  # a token answer, an upload's reply: never read whole
            self._read_body(response)
        return response

    def _cap_redirect(self, response: requests.Response, *args: Any,
                      **kwargs: Any) -> requests.Response:
        """A response hook: requests reads a redirect's body whole before following it;
        this reads it first, capped and on the deadline."""
        if response.is_redirect:
            self._read_body(response)
        return response

    def _read_body(self, response: requests.Response) -> None:
        body, _, _ = _read_capped(self.clock.ref, self.clock, response, MAX_ANSWER_BYTES,
                                  "an answer")
        response._content = body
        response._content_consumed = True


_plain_request = oras.provider.Registry.do_request.__wrapped__
# oras logs registry answers and credential helpers' stderr at warning and error level;
# with no handler of its own, Python's last resort would print them raw to the terminal.
# An application that configures logging still receives them.
logging.getLogger("oras").addHandler(logging.NullHandler())


class _Registry(oras.provider.Registry):  # type: ignore[misc]
    """oras's registry client on a deadline session, without its retries and their sleeps."""

    def __init__(self, ref: Reference, plain_http: bool, clock: _Clock,
                 auth_backend: str, insecure: bool) -> None:
        super().__init__(hostname=ref.registry, insecure=plain_http, auth_backend=auth_backend)
        self.session = _DeadlineSession(clock, insecure)
        self.auth.session = self.session

    def do_request(self, url: str, method: str = "GET", data: Any = None,
                   headers: dict[str, str] | None = None, json: Any = None,
                   stream: bool = False) -> requests.Response:
        """One request (plus oras's own authentication round trip), never retried."""
        response: requests.Response = _plain_request(self, url, method, data, headers, json,
                                                     stream)
        return response


def _docker_configs() -> list[str]:
    folder = os.environ.get("DOCKER_CONFIG")
    return [str(Path(folder) / "config.json")] if folder else []


def _connect(ref: Reference, insecure: bool, clock: _Clock) -> tuple[_Registry, Any]:
    """A client for `ref` with its credentials loaded; the parsed container."""
    plain_http = ref.loopback or insecure
    container = oras.container.Container(f"{ref.repository}:{ref.tag or 'latest'}",
                                         registry=ref.registry)
    # oras reads a first component with a dot or a port as a registry host; the
    # reference was parsed already, so its parts are set as they are.
    namespace, _, name = ref.repository.rpartition("/")
    container.registry, container.namespace, container.repository = \
        ref.registry, namespace or None, name
    container.tag, container.digest = ref.tag or "latest", ref.digest
    # A Basic-auth registry (htpasswd) answers 401 with a Basic challenge; the token
    # backend would try to fetch a token from that challenge's realm.
    probe = _Registry(ref, plain_http, clock, "token", insecure)
    response = _guard(ref, clock, lambda: probe.session.get(
        f"{probe.prefix}://{ref.registry}/v2/", stream=True))
    challenge = response.headers.get("Www-Authenticate", "")
    response.close()
    backend = "basic" if challenge.lower().startswith("basic") else "token"
    client = _Registry(ref, plain_http, clock, backend, insecure)
    with contextlib.suppress(Exception):  # an unreadable Docker config means no credentials
        client.auth.load_configs(container, configs=_docker_configs() or None)
    user, password = os.environ.get("ORAS_USER"), os.environ.get("ORAS_PASS")
    if user and password:
        client.auth.set_basic_auth(user, password)
    if backend == "basic" and not getattr(client.auth, "_basic_auth", None):
        raise RegistryError(f"{ref}: the registry asks for a login, and neither the Docker "
                            f"config nor ORAS_USER/ORAS_PASS has one")
    return client, container


def _guard(ref: Reference, clock: _Clock, action: Any) -> Any:
    """Run one registry exchange, mapping transport failures to named errors. Messages
    name the failure's kind only: a library's text may hold URLs, tokens or headers."""
    try:
        return action()
    except (RegistryError, BundleError):
        raise
    except (requests.exceptions.Timeout, urllib3.exceptions.TimeoutError) as exc:
        raise clock.expired() from exc
    except requests.exceptions.SSLError as exc:
        raise RegistryError(f"{ref}: TLS failed (a plain-http registry off loopback needs "
                            f"--insecure)") from exc
    except requests.exceptions.TooManyRedirects as exc:
        raise RegistryError(f"{ref}: more than {MAX_REDIRECTS} redirects") from exc
    except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
        if time.monotonic() >= clock.ends:
            raise clock.expired() from exc
        raise RegistryError(f"{ref}: cannot reach the registry ({type(exc).__name__})") from exc
    except oras.auth.AuthenticationException as exc:
        raise RegistryError(f"{ref}: authentication failed") from exc
    except Exception as exc:  # oras raises ValueError and friends on refused answers
        raise RegistryError(f"{ref}: the registry refused ({type(exc).__name__})") from exc


def _check_status(ref: Reference, response: requests.Response, what: str,
                  ok: tuple[int, ...] = (200,)) -> None:
    if response.status_code in ok:
        return
    response.close()
    status = response.status_code
    meaning = {401: "unauthorized (log in: Docker config or ORAS_USER/ORAS_PASS)",
               403: "forbidden", 404: "not found"}.get(status, f"HTTP {status}")
    raise RegistryError(f"{ref}: {what}: {meaning}")


def _read_capped(ref: Reference, clock: _Clock, response: requests.Response, cap: int,
                 what: str, sink: IO[bytes] | None = None) -> tuple[bytes, int, str]:
    """Read a response body of at most `cap` bytes, every read bounded by the deadline.
    Returns the body (when no sink), its length and its sha256 digest."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and (len(declared) > 18 or int(declared) > cap):
        response.close()
        raise RegistryTooLarge(f"{ref}: {what} is {declared[:20]} bytes, over {cap}")
    if response.headers.get("Content-Encoding", "identity").lower() != "identity":
        response.close()
        raise RegistryError(f"{ref}: {what} arrived encoded; only identity is accepted")
    raw = response.raw
    digest = hashlib.sha256()
    kept: list[bytes] = []
    total = 0
    try:
        while True:
            sock = getattr(getattr(raw, "connection", None), "sock", None)
            if sock is not None:  # a dripping registry: each read waits at most what is left
                sock.settimeout(clock.remaining())
            chunk = raw.read1(CHUNK, decode_content=False)
            if not chunk:
                break
            total += len(chunk)
            if total > cap:
                raise RegistryTooLarge(f"{ref}: {what} is over {cap} bytes; stopped reading")
            digest.update(chunk)
            if sink is None:
                kept.append(chunk)
            else:
                sink.write(chunk)
            clock.remaining()
    finally:
        response.close()
    return b"".join(kept), total, f"sha256:{digest.hexdigest()}"


def _descriptor(doc: Any, what: str, media_type: str, ref: Reference) -> tuple[str, int]:
    if not isinstance(doc, dict) or doc.get("mediaType") != media_type:
        raise RegistryError(f"{ref}: not a wasmext plugin artifact ({what} is not "
                            f"{media_type})")
    digest, size = doc.get("digest"), doc.get("size")
    if not isinstance(digest, str) or not _DIGEST.match(digest) or type(size) is not int \
            or size < 0:
        raise RegistryError(f"{ref}: {what} has no valid sha256 digest and size")
    return digest, size


def _layer_of(ref: Reference, body: bytes, max_layer_bytes: int) -> tuple[str, int]:
    """The bundle layer's digest and size, from a manifest checked to be ours."""
    try:
        doc = parse_text(body, kind="json", max_bytes=MAX_MANIFEST_BYTES)
    except ConfigTextError as exc:
        raise RegistryError(f"{ref}: the manifest is not valid JSON") from exc
    if not isinstance(doc, dict):
        raise RegistryError(f"{ref}: the manifest is not a JSON object")
    if doc.get("schemaVersion") != 2 or doc.get("mediaType", MANIFEST_MEDIA_TYPE) \
            != MANIFEST_MEDIA_TYPE:
        raise RegistryError(f"{ref}: not an OCI image manifest (an index or another "
                            f"format)")
    if doc.get("artifactType", ARTIFACT_TYPE) != ARTIFACT_TYPE:
        raise RegistryError(f"{ref}: not a wasmext plugin artifact (artifactType)")
    _descriptor(doc.get("config"), "its config", CONFIG_MEDIA_TYPE, ref)
    layers = doc.get("layers")
    if not isinstance(layers, list) or len(layers) != 1:
        raise RegistryError(f"{ref}: a plugin artifact has exactly one layer, the bundle")
    digest, size = _descriptor(layers[0], "its layer", BUNDLE_MEDIA_TYPE, ref)
    if size > max_layer_bytes:
        raise RegistryTooLarge(f"{ref}: the bundle layer declares {size} bytes, over "
                               f"{max_layer_bytes}; not downloaded")
    return digest, size


def pull(reference: str | Reference, out_dir: Path, *, insecure: bool = False,
         deadline_s: float = DEADLINE_S, max_layer_bytes: int = MAX_LAYER_BYTES) -> Pulled:
    """Fetch the plugin bundle `reference` names into `out_dir`, every digest checked."""
    ref = reference if isinstance(reference, Reference) else parse_reference(reference)
    clock = _Clock(deadline_s, ref)
    client, container = _connect(ref, insecure, clock)
    manifest_url = f"{client.prefix}://{container.manifest_url(ref.target)}"
    response = _guard(ref, clock, lambda: client.do_request(
        manifest_url, "GET", headers={"Accept": MANIFEST_MEDIA_TYPE}, stream=True))
    _check_status(ref, response, "manifest")
    named = response.headers.get("Docker-Content-Digest")
    body, _, manifest_digest = _guard(ref, clock, lambda: _read_capped(
        ref, clock, response, MAX_MANIFEST_BYTES, "the manifest"))
    expected = ref.digest or named
    if ref.digest is None and (named is None or not _DIGEST.match(named)):
        # Without a digest to compare, a tampered manifest would pass unseen.
        raise RegistryDigestMismatch(f"{ref}: the registry names no sha256 digest for the "
                                     f"tag; pull by @sha256: instead")
    if manifest_digest != expected:
        raise RegistryDigestMismatch(f"{ref}: the manifest's bytes hash to "
                                     f"{manifest_digest[:19]}..., not {str(expected)[:19]}...")
    layer_digest, size = _layer_of(ref, body, max_layer_bytes)
    out = Path(out_dir) / f"{ref.repository.rsplit('/', 1)[-1]}.wxb"
    response = _guard(ref, clock, lambda: client.get_blob(container, layer_digest,
                                                          stream=True))
    _check_status(ref, response, "bundle layer")
    with atomic_open(out) as fh:
        _, got, digest = _guard(ref, clock, lambda: _read_capped(
            ref, clock, response, size, "the bundle layer", sink=fh))
        if got != size or digest != layer_digest:
            raise RegistryDigestMismatch(f"{ref}: the bundle layer ({got} bytes) does not "
                                         f"match its descriptor's digest and size")
    return Pulled(out, manifest_digest, layer_digest, size)


def install(reference: str | Reference, dest: Path, *, trusted: tuple[str, ...] = (),
            require_signature: bool = False, replace: bool = False,
            allow_downgrade: bool = False, insecure: bool = False,
            deadline_s: float = DEADLINE_S,
            max_layer_bytes: int = MAX_LAYER_BYTES) -> tuple[Path, Pulled]:
    """Pull `reference` and install it as a `.wxb` install does; the folder and the pull."""
    with tempfile.TemporaryDirectory(prefix="wasmext-oci-") as tmp:
        pulled = pull(reference, Path(tmp), insecure=insecure, deadline_s=deadline_s,
                      max_layer_bytes=max_layer_bytes)
        folder = bundles.install(pulled.path, dest, trusted=trusted,
                                 require_signature=require_signature, replace=replace,
                                 allow_downgrade=allow_downgrade)
    return folder, pulled


@contextlib.contextmanager
def _bundle_file(source: Path) -> Iterator[Path]:
    """A checked bundle for `source`: the .wxb itself, or a folder packed into one."""
    if source.is_dir():
        with tempfile.TemporaryDirectory(prefix="wasmext-push-") as tmp:
            out = Path(tmp) / "plugin.wxb"
            bundles.pack(source, out)
            yield out
    else:
        yield source


def push(source: Path, reference: str | Reference, *, insecure: bool = False,
         deadline_s: float = DEADLINE_S) -> str:
    """Publish a plugin folder or `.wxb` bundle at `reference` (a tag); the manifest digest."""
    ref = reference if isinstance(reference, Reference) else parse_reference(reference)
    if ref.digest:
        raise RegistryError(f"{ref}: push to a tag; the digest is the registry's answer")
    with _bundle_file(Path(source)) as path, tempfile.TemporaryDirectory(
            prefix="wasmext-push-") as tmp:
        bundle = bundles.read_bundle(path)  # only a bundle an install would accept
        if bundle.signature is not None:
            # A signature that does not verify even under its own key would fail every
            # install that checks signatures: refused before anything is published.
            bundles.check_signature(bundle, (bundle.signature["key"],), True)
        data = path.read_bytes()
        config = json.dumps({"format": 1, "id": bundle.plugin_id, "version": bundle.version},
                            sort_keys=True).encode()
        config_path = Path(tmp) / "config.json"
        config_path.write_bytes(config)
        layer = {"mediaType": BUNDLE_MEDIA_TYPE, "digest": _sha256(data), "size": len(data),
                 "annotations": {TITLE: f"{bundle.plugin_id}.wxb"}}
        config_desc = {"mediaType": CONFIG_MEDIA_TYPE, "digest": _sha256(config),
                       "size": len(config)}
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE,
            "artifactType": ARTIFACT_TYPE, "config": config_desc, "layers": [layer],
            "annotations": {"org.opencontainers.image.version": bundle.version}},
            sort_keys=True, separators=(",", ":")).encode()
        clock = _Clock(deadline_s, ref)
        client, container = _connect(ref, insecure, clock)
        for blob, desc in ((path, layer), (config_path, config_desc)):
            response = _guard(ref, clock, lambda b=blob, d=desc: client.upload_blob(
                str(b), container, d))
            _check_status(ref, response, "blob upload", ok=(200, 201, 202))
        url = f"{client.prefix}://{container.manifest_url(ref.tag)}"
        response = _guard(ref, clock, lambda: client.do_request(
            url, "PUT", data=manifest, headers={"Content-Type": MANIFEST_MEDIA_TYPE}))
        _check_status(ref, response, "manifest upload", ok=(200, 201))
    digest = _sha256(manifest)
    answered = response.headers.get("Docker-Content-Digest")
    if answered is not None and answered != digest:
        raise RegistryDigestMismatch(f"{ref}: the registry stored the manifest as "
                                     f"{clean(answered, 80)}, not {digest}")
    return digest


def _sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"
