"""Bundles: one plugin as one verified file (`NAME.wxb`, a zip).

    plugin.toml, <id>.wasm, README.md   the plugin folder's files (flat names only)
    WXB-MANIFEST.json                   {"format": 1, "id", "version",
                                         "files": {name: {"sha256", "size"}}}
    WXB-SIGNATURE.json                  optional: {"key": "ed25519:...", "signature"}
                                        over the exact bytes of WXB-MANIFEST.json

A bundle is hostile until checked. `read_bundle` refuses, each with a named
error: an archive or entry over its size cap or compression ratio (declared
sizes are checked before anything is inflated; reads are capped too), more
entries than a plugin has, a name that climbs out (`..`), is absolute, nests
folders, or repeats; a symlink, device, fifo or directory entry; and a digest
manifest that lies or leaves a file out. `install` writes into a fresh
temporary folder beside the target (files created exclusive, never through a
link) and moves it into place only when everything checked out: a refused
bundle leaves nothing behind. A replacement swaps the two folders in one
`renameat2(RENAME_EXCHANGE)`, so an install killed at any moment leaves the old
or the new plugin installed, never none; a bundle older than the installed
version is refused (`BundleDowngrade`) unless the operator allows a downgrade.
The installed folder keeps the digest manifest and signature, so a host with
`require_signature` checks them at every load.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wasmext._toml import ConfigTextError, parse_text
from wasmext.errors import (
    BundleAbsolutePath,
    BundleDeviceEntry,
    BundleDigestMismatch,
    BundleDowngrade,
    BundleDuplicateEntry,
    BundleError,
    BundleLinkEntry,
    BundlePathTraversal,
    BundleTooLarge,
    BundleTooManyEntries,
    SignatureRequired,
)
from wasmext.files import atomic_open, fsync_dir, read_regular, replace_dir
from wasmext.lifecycle.signing import verify
from wasmext.manifest import Manifest, load_folder, parse_manifest, version_key

__all__ = ["Bundle", "install", "pack", "read_bundle", "sign_bundle", "verify_folder"]

MANIFEST_NAME = "WXB-MANIFEST.json"
SIGNATURE_NAME = "WXB-SIGNATURE.json"
MAX_ARCHIVE_BYTES = 256 * 2**20
MAX_ENTRIES = 64
MAX_ENTRY_BYTES = 128 * 2**20
MAX_TOTAL_BYTES = 256 * 2**20
MAX_RATIO = 200  # uncompressed / compressed, for entries over RATIO_FLOOR
RATIO_FLOOR = 2**20
MAX_META_BYTES = 64 * 1024
_DRIVE = re.compile(r"^[A-Za-z]:")
# What a plugin folder holds: no hidden, control, bidi or look-alike characters.
PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Bundle:
    """A checked .wxb bundle: the plugin's files, manifest and signature."""

    path: Path
    plugin_id: str
    version: str
    files: dict[str, bytes]  # the plugin's files, checked against the digest manifest
    manifest_bytes: bytes
    signature: dict[str, str] | None

    @property
    def signed_by(self) -> str | None:
        """The signing key, or None when unsigned."""
        return self.signature["key"] if self.signature else None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _plugin_files(folder: Path, manifest: Manifest) -> list[str]:
    names = ["plugin.toml", manifest.wasm_name]
    names += [n for n in ("README.md", "README") if (folder / n).exists()]
    return names


def pack(folder: Path, out: Path) -> dict[str, Any]:
    """Write the plugin folder as a bundle at `out`; its digest manifest."""
    folder = Path(folder)
    manifest = load_folder(folder)
    files: dict[str, bytes] = {}
    for name in _plugin_files(folder, manifest):
        path = folder / name
        info = path.lstat() if path.is_symlink() or path.exists() else None
        if info is None:
            raise BundleError(f"{path}: missing (build the plugin first)", plugin_id=manifest.id)
        if stat.S_ISLNK(info.st_mode) or info.st_nlink > 1:
            kind = "symlink" if stat.S_ISLNK(info.st_mode) else "hard link"
            raise BundleLinkEntry(f"{path}: a {kind}; bundles hold plain files only",
                                  plugin_id=manifest.id)
        if not stat.S_ISREG(info.st_mode):
            raise BundleDeviceEntry(f"{path}: not a regular file", plugin_id=manifest.id)
        files[name] = path.read_bytes()
    doc = {"format": 1, "id": manifest.id, "version": manifest.version,
           "files": {n: {"sha256": _sha256(d), "size": len(d)} for n, d in files.items()}}
    _write_zip(out, {**files, MANIFEST_NAME: json.dumps(doc, indent=1, sort_keys=True).encode()})
    return doc


def _write_zip(out: Path, entries: dict[str, bytes]) -> None:
    with atomic_open(out) as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)


def _check_entry(info: zipfile.ZipInfo, where: str) -> None:
    name = info.filename
    if not name or "\0" in name or len(name) > 255:
        raise BundleError(f"{where}: an entry name that is empty, too long or has NUL")
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        raise BundleAbsolutePath(f"{where}: entry {name[:80]!r} is an absolute path")
    parts = re.split(r"[/\\]", name)
    if ".." in parts:
        raise BundlePathTraversal(f"{where}: entry {name[:80]!r} climbs out of the folder")
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if kind == stat.S_IFLNK:
        raise BundleLinkEntry(f"{where}: entry {name[:80]!r} is a symlink")
    if info.is_dir() or kind == stat.S_IFDIR:
        raise BundleDeviceEntry(f"{where}: entry {name[:80]!r} is a directory")
    if kind not in (0, stat.S_IFREG):
        raise BundleDeviceEntry(f"{where}: entry {name[:80]!r} is a device, fifo or socket")
    if len(parts) > 1 or not PLAIN_NAME.match(name):
        raise BundleError(f"{where}: entry {name[:80]!r}: bundles hold plain file names only "
                          f"(letters, digits, '.', '_', '-')")
    if info.flag_bits & 0x1:
        raise BundleError(f"{where}: entry {name[:80]!r} is encrypted")


def read_bundle(path: Path) -> Bundle:
    """Open and check a bundle (see the module doc); raises BundleError subclasses."""
    path = Path(path)
    where = path.name[:120]
    try:
        found = path.stat()
        if not stat.S_ISREG(found.st_mode):  # a fifo or device would block or never end
            raise BundleDeviceEntry(f"{where}: not a regular file")
        if found.st_size > MAX_ARCHIVE_BYTES:
            raise BundleTooLarge(f"{where}: {found.st_size} bytes, over {MAX_ARCHIVE_BYTES}")
        with path.open("rb") as fh:
            raw = fh.read(MAX_ARCHIVE_BYTES + 1)
        if len(raw) > MAX_ARCHIVE_BYTES:
            raise BundleTooLarge(f"{where}: over {MAX_ARCHIVE_BYTES} bytes")
        zf = zipfile.ZipFile(io.BytesIO(raw))
    except BundleError:
        raise
    except Exception as exc:  # BadZipFile, OSError, struct and zlib errors: all hostile input
        raise BundleError(f"{where}: not a readable bundle: {type(exc).__name__}") from exc
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_ENTRIES:
            raise BundleTooManyEntries(f"{where}: {len(infos)} entries, over {MAX_ENTRIES}")
        seen: set[str] = set()
        total = 0
        for info in infos:
            _check_entry(info, where)
            if info.filename.lower() in seen:
                raise BundleDuplicateEntry(f"{where}: entry {info.filename[:80]!r} appears "
                                           f"twice")
            seen.add(info.filename.lower())
            total += info.file_size
            if info.file_size > MAX_ENTRY_BYTES or total > MAX_TOTAL_BYTES:
                raise BundleTooLarge(f"{where}: declares {total} bytes unpacked, over "
                                     f"{MAX_TOTAL_BYTES} (or {MAX_ENTRY_BYTES} for one entry)")
            if info.file_size > RATIO_FLOOR and \
                    info.file_size > MAX_RATIO * max(info.compress_size, 1):
                raise BundleTooLarge(f"{where}: entry {info.filename[:80]!r} compresses "
                                     f"over {MAX_RATIO}:1")
        entries: dict[str, bytes] = {}
        for info in infos:
            try:
                with zf.open(info) as fh:
                    data = fh.read(info.file_size + 1)  # never more than it declared
            except Exception as exc:  # zlib.error, BadZipFile (CRC), NotImplementedError ...
                raise BundleError(f"{where}: entry {info.filename[:80]!r} is damaged: "
                                  f"{type(exc).__name__}") from exc
            if len(data) != info.file_size:
                raise BundleTooLarge(f"{where}: entry {info.filename[:80]!r} is not the size "
                                     f"it declares")
            entries[info.filename] = data
    return _verified(path, where, entries)


def _json(data: bytes | None, where: str, what: str) -> dict[str, Any]:
    if data is None or len(data) > MAX_META_BYTES:
        raise BundleDigestMismatch(f"{where}: {what} is missing or over {MAX_META_BYTES} bytes")
    try:
        doc = parse_text(data, kind="json", max_bytes=MAX_META_BYTES)
    except ConfigTextError as exc:
        raise BundleDigestMismatch(f"{where}: {what} is not valid JSON: {exc}") from exc
    return doc


def _check_digests(doc: dict[str, Any], files: dict[str, bytes], where: str) -> dict[str, Any]:
    listed = doc.get("files")
    if doc.get("format") != 1 or not isinstance(listed, dict):
        raise BundleDigestMismatch(f"{where}: {MANIFEST_NAME} is not a format-1 digest manifest")
    if set(listed) != set(files):
        extra = sorted(set(files) ^ set(listed))
        raise BundleDigestMismatch(f"{where}: {MANIFEST_NAME} does not list exactly the "
                                   f"files present (differs on {extra[:3]})")
    for name, data in files.items():
        entry = listed[name]
        if not isinstance(entry, dict) or entry.get("sha256") != _sha256(data) \
                or entry.get("size") != len(data):
            raise BundleDigestMismatch(f"{where}: {name[:80]!r} does not match its digest in "
                                       f"{MANIFEST_NAME}")
    return listed


def _verified(path: Path, where: str, entries: dict[str, bytes]) -> Bundle:
    manifest_bytes = entries.pop(MANIFEST_NAME, None)
    doc = _json(manifest_bytes, where, MANIFEST_NAME)
    sig_raw = entries.pop(SIGNATURE_NAME, None)
    _check_digests(doc, entries, where)
    if "plugin.toml" not in entries:
        raise BundleError(f"{where}: no plugin.toml")
    try:
        data = parse_text(entries["plugin.toml"], max_bytes=MAX_META_BYTES)
    except ConfigTextError as exc:
        raise BundleError(f"{where}: plugin.toml: {exc}") from exc
    manifest = parse_manifest(data, Path(where) / "plugin.toml")
    if doc.get("id") != manifest.id or manifest.wasm_name not in entries:
        raise BundleDigestMismatch(f"{where}: the digest manifest is for another plugin, or "
                                   f"{manifest.wasm_name} is missing", plugin_id=manifest.id)
    signature = None
    if sig_raw is not None:
        sig = _json(sig_raw, where, SIGNATURE_NAME)
        if not isinstance(sig.get("key"), str) or not isinstance(sig.get("signature"), str):
            raise BundleDigestMismatch(f"{where}: {SIGNATURE_NAME} needs 'key' and 'signature'")
        signature = {"key": sig["key"], "signature": sig["signature"]}
    assert manifest_bytes is not None
    return Bundle(path, manifest.id, manifest.version, entries, manifest_bytes, signature)


def check_signature(bundle: Bundle, trusted: tuple[str, ...], required: bool) -> None:
    """Verify the bundle's signature against `trusted` keys (SignatureInvalid), or refuse
    an unsigned one when `required` (SignatureRequired). Unsigned and not required: ok."""
    where = f"{bundle.path.name[:120]} ({bundle.plugin_id})"
    if bundle.signature is None:
        if required:
            raise SignatureRequired(f"{where}: unsigned, and this host requires a signature",
                                    plugin_id=bundle.plugin_id)
        return
    if required or trusted:
        verify(bundle.manifest_bytes, bundle.signature["key"], bundle.signature["signature"],
               trusted, where)


def sign_bundle(path: Path, key_path: Path) -> str:
    """Sign a bundle's digest manifest (replacing any signature); the signer's key."""
    from wasmext.lifecycle.signing import sign

    bundle = read_bundle(path)
    public, signature = sign(key_path, bundle.manifest_bytes)
    sig = json.dumps({"key": public, "signature": signature}, sort_keys=True).encode()
    _write_zip(path, {**bundle.files, MANIFEST_NAME: bundle.manifest_bytes, SIGNATURE_NAME: sig})
    return public


def _write_new(path: Path, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


STALE_STAGING_S = 3600


def _remove_stale_staging(dest: Path) -> None:
    """Staging folders an install killed midway left behind (an hour old: no install
    still running takes that long)."""
    now = time.time()
    for old in dest.glob(".wxb-install-*"):
        with contextlib.suppress(OSError):
            if not old.is_symlink() and now - old.lstat().st_mtime > STALE_STAGING_S:
                shutil.rmtree(old, ignore_errors=True)


def _installed_version(target: Path) -> str | None:
    try:
        return load_folder(target).version
    except Exception:  # a damaged installed folder has no version to protect
        return None


def install(path: Path, dest: Path, *, trusted: tuple[str, ...] = (),
            require_signature: bool = False, replace: bool = False,
            allow_downgrade: bool = False) -> Path:
    """Check and unpack a bundle into `dest/<id>`; the installed folder."""
    bundle = read_bundle(path)
    check_signature(bundle, trusted, require_signature)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / bundle.plugin_id
    present = target.exists() or target.is_symlink()
    if present and not replace:
        raise BundleError(f"{bundle.plugin_id} is already installed at {target} (use --replace)",
                          plugin_id=bundle.plugin_id)
    installed = _installed_version(target) if present else None
    if installed is not None and not allow_downgrade \
            and version_key(bundle.version) < version_key(installed):
        raise BundleDowngrade(f"{bundle.plugin_id} {bundle.version} is older than the installed "
                              f"{installed}; refused (use --allow-downgrade)",
                              plugin_id=bundle.plugin_id)
    _remove_stale_staging(dest)
    # A dot folder: discovery never mistakes the half-written copy for a plugin.
    staging_root = Path(tempfile.mkdtemp(prefix=".wxb-install-", dir=dest))
    try:
        staging = staging_root / bundle.plugin_id
        staging.mkdir()
        extra = {MANIFEST_NAME: bundle.manifest_bytes}
        if bundle.signature is not None:
            extra[SIGNATURE_NAME] = json.dumps(bundle.signature, sort_keys=True).encode()
        for name, data in {**bundle.files, **extra}.items():
            _write_new(staging / name, data)
        load_folder(staging)  # the folder rules every loader follows
        fsync_dir(staging)
        replace_dir(staging, target, staging_root / ".old")
        fsync_dir(dest)
    finally:
        shutil.rmtree(staging_root, ignore_errors=True)
    return target


def verify_folder(folder: Path, manifest: Manifest, trusted: tuple[str, ...]
                  ) -> tuple[str, bytes]:
    """For `require_signature`: the folder holds a signed digest manifest by a trusted
    key, and its plugin.toml (as `manifest` was parsed from) and module match it.

    Returns the signed module digest ("sha256:...") and the module bytes that were
    checked: the loader compiles those bytes, never the file read again, and compares
    the digest with what it compiled."""
    where = f"{folder.name[:120]} ({manifest.id})"
    try:
        manifest_bytes = read_regular(folder / MANIFEST_NAME, MAX_META_BYTES)
        sig_bytes = read_regular(folder / SIGNATURE_NAME, MAX_META_BYTES)
    except OSError as exc:
        raise SignatureRequired(f"{where}: not installed from a signed bundle, and this host "
                                f"requires a signature", plugin_id=manifest.id) from exc
    sig = _json(sig_bytes, where, SIGNATURE_NAME)
    verify(manifest_bytes, str(sig.get("key", "")), str(sig.get("signature", "")), trusted,
           where)
    listed = _json(manifest_bytes, where, MANIFEST_NAME).get("files")
    checked: dict[str, bytes] = {}
    for name in ("plugin.toml", manifest.wasm_name):  # what runs; the README is only read
        entry = listed.get(name) if isinstance(listed, dict) else None
        try:
            data = read_regular(folder / name, MAX_ENTRY_BYTES)
        except OSError as exc:
            raise BundleDigestMismatch(f"{where}: cannot read {name}: {exc.strerror}",
                                       plugin_id=manifest.id) from exc
        if not isinstance(entry, dict) or entry.get("sha256") != _sha256(data):
            raise BundleDigestMismatch(f"{where}: {name} does not match its signed digest",
                                       plugin_id=manifest.id)
        if name == "plugin.toml" and not _same_manifest(data, manifest):
            raise BundleDigestMismatch(f"{where}: plugin.toml changed while it was loaded",
                                       plugin_id=manifest.id)
        checked[name] = data
    assert isinstance(listed, dict)
    return f"sha256:{listed[manifest.wasm_name]['sha256']}", checked[manifest.wasm_name]


def _same_manifest(data: bytes, manifest: Manifest) -> bool:
    """`data` is the file `manifest` was parsed from: the same bytes, the same meaning."""
    if manifest.source_digest and manifest.source_digest != f"sha256:{_sha256(data)}":
        return False
    try:
        parsed = parse_manifest(parse_text(data, max_bytes=MAX_META_BYTES), manifest.path)
    except Exception:  # a different, unparsable file is simply not the same manifest
        return False
    return dataclasses.replace(parsed, source_digest=manifest.source_digest) == manifest
