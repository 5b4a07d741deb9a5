"""`wasmext pack | install | push | uninstall | keygen | sign | grant | grants | revoke`:
a plugin's life as one verified file, and the operator's recorded approvals."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from wasmext.errors import ConfigError, NotInstalled, WasmextError
from wasmext_cli.common import (
    CONFIG_OPT,
    EXIT_FAULT,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    PLUGINS_OPT,
    _default_config,
    _dumps,
    _echo_json,
    _fail,
    _host,
    _line,
    absolute_fs_grant,
    looked_in,
    must_exist,
    not_found,
)

if TYPE_CHECKING:
    from wasmext.config import HostConfig
    from wasmext.lifecycle.approvals import Subject

BUNDLE = click.Path(dir_okay=False, path_type=Path)  # must_exist: a missing one exits 1


def _sha256(data: bytes) -> str:
    import hashlib  # OpenSSL's load is a third of `wasmext --help`'s own time

    return "sha256:" + hashlib.sha256(data).hexdigest()


def _user() -> str:
    import getpass

    return getpass.getuser()


def _config(config: Path | None) -> HostConfig:
    from wasmext.config import HostConfig, load_config  # here, so that `--help` starts fast

    try:
        return load_config(config) if config else HostConfig()
    except WasmextError as err:
        _fail(err, EXIT_USAGE)


def _dest(cfg: HostConfig, to: str) -> Path:
    folder = cfg.user_dir if to == "user" else cfg.workspace_dir
    if folder is None:  # installing where no host looks would only lose the plugin
        _fail(ConfigError(f"the config names no [plugins] {to}_dir to install into"),
              EXIT_USAGE)
    return folder


@click.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="The bundle to write (NAME.wxb).")
def pack(folder: Path, out: Path) -> None:
    """Pack a built plugin FOLDER into one bundle: plugin.toml, module, README, digests."""
    from wasmext.lifecycle.bundle import pack as pack_folder

    must_exist(folder, "plugin folder")
    try:
        doc = pack_folder(folder, out)
    except WasmextError as err:
        _fail(err)
    click.echo(f"packed {doc['id']} {doc['version']} into {out} ({len(doc['files'])} files)")


INSECURE_OPT = click.option(
    "--insecure", is_flag=True,
    help="Allow plain http to a registry that is not on loopback (loopback always may).")
DEADLINE_OPT = click.option(
    "--deadline", "deadline_s", type=click.FloatRange(min=0.1, max=3600), default=60.0,
    show_default=True, help="Seconds the whole registry exchange may take.")


def _oci() -> Any:
    """wasmext.lifecycle.oci, or a usage error naming the extra it needs."""
    try:
        from wasmext.lifecycle import oci
    except ModuleNotFoundError as exc:
        _fail(ConfigError(f"oci:// references need the oras client ({exc.name} is missing): "
                          f"pip install 'wasmext[oci]'"), EXIT_USAGE)
    return oci


@click.command()
@click.argument("source")
@click.option("--to", "to", type=click.Choice(["user", "workspace"]), default="workspace",
              show_default=True, help="Which plugin directory of the config to install into.")
@click.option("--replace", is_flag=True, help="Replace an installed plugin of the same id.")
@click.option("--allow-downgrade", is_flag=True,
              help="With --replace: allow a version older than the installed one.")
@INSECURE_OPT
@DEADLINE_OPT
@CONFIG_OPT
def install(source: str, to: str, replace: bool, allow_downgrade: bool, insecure: bool,
            deadline_s: float, config: Path | None) -> None:
    """Check SOURCE (a BUNDLE.wxb, or oci://REGISTRY/NAME:TAG or @sha256:...) and its
    signature, if the config requires one, and install it."""
    from wasmext.lifecycle.bundle import install as install_bundle

    if "://" not in source and not Path(source).exists():  # before the config: it is fine
        not_found(f"no bundle file at {source} (nor an oci:// reference)")
    cfg = _config(_default_config(config))
    dest = _dest(cfg, to)
    try:
        if source.startswith("oci://"):
            oci = _oci()
            folder, pulled = oci.install(source, dest, insecure=insecure, deadline_s=deadline_s,
                                         trusted=cfg.trusted_keys,
                                         require_signature=cfg.require_signature,
                                         replace=replace, allow_downgrade=allow_downgrade)
            click.echo(_line(f"pulled {source} (manifest {pulled.manifest_digest})"))
        else:
            path = Path(source)
            scheme, sep, _ = source.partition("://")
            if sep and not path.is_file():  # a URL may carry a login: never echoed
                _fail(ConfigError(f"{scheme[:16]}://...: not a bundle file or an oci://"
                                  " reference"), EXIT_USAGE)
            if not path.is_file():
                _fail(ConfigError(f"{source}: no such bundle file (or an oci:// reference)"),
                      EXIT_USAGE)
            folder = install_bundle(path, dest, trusted=cfg.trusted_keys,
                                    require_signature=cfg.require_signature,
                                    replace=replace, allow_downgrade=allow_downgrade)
    except WasmextError as err:
        _fail(err)
    click.echo(f"installed {folder.name} into {folder}")


@click.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("reference")
@INSECURE_OPT
@DEADLINE_OPT
def push(source: Path, reference: str, insecure: bool, deadline_s: float) -> None:
    """Publish SOURCE (a built plugin FOLDER or a BUNDLE.wxb) at REFERENCE,
    oci://REGISTRY/NAME:TAG, as a wasmext plugin artifact."""
    must_exist(source, "plugin folder or bundle file")
    oci = _oci()
    try:
        digest = oci.push(source, reference, insecure=insecure, deadline_s=deadline_s)
    except WasmextError as err:
        _fail(err)
    click.echo(_line(f"pushed {source} to {reference} ({digest}); "
                     f"pin it as {reference.rsplit(':', 1)[0]}@{digest}"))


@click.command()
@click.argument("plugin_id")
@click.option("--purge-state", is_flag=True, help="Also delete its state, in every scope.")
@CONFIG_OPT
@PLUGINS_OPT
def uninstall(plugin_id: str, purge_state: bool, config: Path | None,
              plugin_dirs: tuple[Path, ...]) -> None:
    """Unload PLUGIN_ID and remove its folder (and, with --purge-state, its state)."""
    from wasmext.lifecycle.uninstall import uninstall as remove

    logging.getLogger("wasmext").addHandler(logging.NullHandler())
    try:
        host = _host(_default_config(config), plugin_dirs)
    except WasmextError as err:
        _fail(err, EXIT_USAGE)
    with host:
        try:
            report = remove(host, plugin_id, purge_state=purge_state)
        except WasmextError as err:
            _fail(err, EXIT_NOT_FOUND if isinstance(err, NotInstalled) else EXIT_FAULT)
    click.echo(f"uninstalled {plugin_id} (folder {report.folder or '-'}; "
               f"{report.state_entries} state entries purged; "
               f"{report.approvals} approvals revoked)")


@click.command()
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="Where to write the private key (PEM, owner-only).")
def keygen(out: Path) -> None:
    """Make an Ed25519 signing key; prints the public key for [trust] keys."""
    from wasmext.lifecycle.signing import generate_key

    if out.exists():
        _fail(ConfigError(f"{out} exists; refusing to overwrite a key"), EXIT_USAGE)
    click.echo(generate_key(out))


@click.command()
@click.argument("bundle", type=BUNDLE)
@click.option("--key", "key", required=True, type=click.Path(exists=True, dir_okay=False,
                                                             path_type=Path))
def sign(bundle: Path, key: Path) -> None:
    """Sign BUNDLE's digest manifest with KEY (a signature never grants a capability)."""
    from wasmext.lifecycle.bundle import sign_bundle

    must_exist(bundle, "bundle file")
    try:
        public = sign_bundle(bundle, key)
    except WasmextError as err:
        _fail(err)
    click.echo(f"signed {bundle} with {public}")


def _find_installed(cfg: HostConfig, plugin_id: str) -> Path | None:
    """The installed plugin's folder, or None."""
    from wasmext.lifecycle.uninstall import find_folder

    return find_folder(cfg.plugin_dirs(), plugin_id)


def _current_subject(cfg: HostConfig, plugin_id: str) -> tuple[Subject, Path] | None:
    """What the installed plugin is now (module, manifest, files it makes the host run),
    read as a host with `cfg` would load it, and its folder; None when not installed."""
    from wasmext.lifecycle.approvals import subject_of
    from wasmext.manifest import load_folder
    from wasmext.runtime import allowed_environ

    folder = _find_installed(cfg, plugin_id)
    if folder is None:
        return None
    manifest = load_folder(folder)
    over = cfg.overrides.get(plugin_id)
    manifest = manifest.resolve_mcp(allowed_environ(manifest, over.env if over else (),
                                                    denied=cfg.credential_env))
    try:
        wasm = manifest.wasm_path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"plugin {plugin_id}: cannot read its module: {exc.strerror}",
                          plugin_id=plugin_id) from exc
    return subject_of(_sha256(wasm), manifest), folder


@click.command()
@click.argument("plugin_id")
@click.argument("capabilities", nargs=-1, required=True)
@click.option("--by", "by", help="Who approves (default: the login name).")
@CONFIG_OPT
def grant(plugin_id: str, capabilities: tuple[str, ...], by: str | None,
          config: Path | None) -> None:
    """Grant CAPABILITIES to PLUGIN_ID's current module (recorded with who and when).

    A folder grant fs:PATH[:ro|rw] (read-only by default) shows PATH to the plugin
    at /NAME, NAME being the folder's own name; a relative PATH is made absolute.
    A component sees the folder read-only even when granted rw (the [fs] quota
    cannot bound a component's writes)."""
    from wasmext.capabilities import capability_problem
    from wasmext.lifecycle.approvals import ApprovalStore

    # A folder grant names an absolute folder: `fs:notes:rw` means ./notes from here.
    capabilities = tuple(absolute_fs_grant(c) for c in capabilities)
    for capability in capabilities:
        problem = capability_problem(capability)
        if problem is not None:
            _fail(ConfigError(problem, plugin_id=plugin_id), EXIT_USAGE)
    cfg = _config(_default_config(config))
    try:
        found = _current_subject(cfg, plugin_id)
    except WasmextError as err:
        _fail(err)
    if found is None:
        _fail(NotInstalled(f"plugin {plugin_id} is not installed{looked_in(cfg)}",
                          plugin_id=plugin_id), EXIT_NOT_FOUND)
    subject, folder = found
    who = by or _user()
    ApprovalStore.in_data_dir(cfg.data_dir).grant(plugin_id, subject, list(capabilities), who,
                                                  str(folder))
    click.echo(_line(f"granted {', '.join(capabilities)} to {plugin_id} "
                     f"({subject.module[:19]}..., plugin.toml {subject.manifest[:19]}...) "
                     f"by {who}"))
    _note_servers_not_declared(plugin_id, folder, capabilities)
    writable = [c for c in capabilities if c.startswith("fs:") and c.endswith(":rw")]
    if writable and _is_component_folder(folder):
        click.echo(_line(f"note: {plugin_id} is a component: it sees {', '.join(writable)} "
                         "read-only (the [fs] quota cannot bound a component's writes)"))


def _note_servers_not_declared(plugin_id: str, folder: Path,
                               capabilities: tuple[str, ...]) -> None:
    """A note for each mcp-server:NAME grant whose server the plugin's manifest does not
    declare: such a grant runs nothing (a typo in NAME, or the wrong plugin)."""
    from wasmext.manifest import load_folder

    try:
        declared = [s.name for s in load_folder(folder).mcp_servers]
    except (OSError, WasmextError):
        return
    for capability in capabilities:
        name = capability.removeprefix("mcp-server:")
        if capability.startswith("mcp-server:") and name not in declared:
            click.echo(_line(f"note: {plugin_id}'s plugin.toml declares no MCP server "
                             f"{name!r} (it declares: {', '.join(declared) or 'none'}), so "
                             "this grant runs nothing"))


def _is_component_folder(folder: Path) -> bool:
    """Is the plugin in `folder` a component (its module's header says so)?"""
    from wasmext.manifest import load_folder
    from wasmext.sandbox.backends.component import is_component

    try:
        with load_folder(folder).wasm_path.open("rb") as module:
            return is_component(module.read(8))
    except (OSError, WasmextError):
        return False


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@CONFIG_OPT
def grants(as_json: bool, config: Path | None) -> None:
    """List recorded approvals, and whether each still covers the plugin as installed
    (module, plugin.toml and the files it makes the host run); if not, what changed."""
    from wasmext.lifecycle.approvals import ApprovalStore

    cfg = _config(_default_config(config))
    rows: list[dict[str, Any]] = []
    for a in ApprovalStore.in_data_dir(cfg.data_dir).all():
        changed: list[str] = []
        try:
            found = _current_subject(cfg, a.plugin_id)
            changed = found[0].changes(a.entry) if found is not None else []
            status = ("not installed" if found is None else
                      f"withheld ({', '.join(changed)} changed)" if changed else "active")
        except WasmextError:
            status = "unreadable"
        rows.append({"plugin": a.plugin_id, "capability": a.capability, "digest": a.digest,
                     "manifest": str(a.entry.get("manifest", "")), "changed": changed,
                     "by": a.by, "at": a.at, "status": status})
    if as_json:
        _echo_json(rows)
        return
    for r in rows:
        click.echo(_line(f"{r['plugin']:<20} {r['capability']:<24} {r['status']:<26} "
                         f"by {r['by']} at {r['at']}"))
    # What the config grants is no recorded approval, but an empty listing read as
    # "nothing is granted" while [grants.ID] gave plugins capabilities.
    for pid, grant in sorted(cfg.grants.items()):
        click.echo(_line(f"note: [grants.{pid}] in the config also grants "
                         f"{', '.join(sorted(grant.capabilities)) or 'nothing'}"), err=True)
    if not rows and not cfg.grants:
        click.echo("no recorded approvals (wasmext grant ID CAPABILITY records one)",
                   err=True)


@click.command()
@click.argument("plugin_id")
@click.argument("capabilities", nargs=-1)
@CONFIG_OPT
def revoke(plugin_id: str, capabilities: tuple[str, ...], config: Path | None) -> None:
    """Revoke recorded CAPABILITIES of PLUGIN_ID (all of them when none is named)."""
    from wasmext.lifecycle.approvals import ApprovalStore

    cfg = _config(_default_config(config))
    n = ApprovalStore.in_data_dir(cfg.data_dir).revoke(plugin_id, list(capabilities) or None)
    # An uninstalled plugin's approvals may still be revoked; nothing to revoke of a plugin
    # that is not there is a typo, said as every command says it.
    if n == 0 and _find_installed(cfg, plugin_id) is None:
        _fail(NotInstalled(f"plugin {plugin_id} is not installed{looked_in(cfg)} and has "
                           "no recorded approval", plugin_id=plugin_id), EXIT_NOT_FOUND)
    click.echo(f"revoked {n} approval{'s' if n != 1 else ''} of {plugin_id}")
    # A grant written in wasmext.toml is not a recorded approval: "revoked 0" alone read as
    # if the plugin had lost it.
    configured = cfg.grants.get(plugin_id)
    given = configured.capabilities if configured is not None else frozenset()
    kept = sorted(given & set(capabilities) if capabilities else given)
    if kept:
        click.echo(_line(f"note: [grants.{plugin_id}] in the config still grants "
                         f"{', '.join(kept)}: remove it there"))


def inspect_bundle(path: Path, as_json: bool) -> None:
    """`wasmext inspect NAME.wxb`: the bundle checked and described, nothing installed."""
    from wasmext import Runtime
    from wasmext.lifecycle.bundle import check_signature, read_bundle

    cfg = _config(_default_config(None))
    try:
        bundle = read_bundle(path)
        try:
            check_signature(bundle, cfg.trusted_keys, False)
            trust = "trusted" if bundle.signature and cfg.trusted_keys else \
                ("unchecked (no [trust] keys)" if bundle.signature else "unsigned")
        except WasmextError as err:
            trust = f"refused: {err.message}"
        wasm_name = next(n for n in bundle.files if n.endswith(".wasm"))
        with Runtime(cache=False) as rt:
            info = rt.load(bundle.files[wasm_name], plugin_id=bundle.plugin_id).describe()
    except WasmextError as err:
        _fail(err)
    files = {n: _sha256(d) for n, d in bundle.files.items()}
    doc = {"bundle": str(path), "id": bundle.plugin_id, "version": bundle.version,
           "files": files, "signed_by": bundle.signed_by, "signature": trust, "module": info}
    if as_json:
        _echo_json(doc)
        return
    click.echo(_line(f"bundle    {path.name}  {doc['id']} {doc['version']}"))
    for name, digest in files.items():
        click.echo(_line(f"  {name:<24} {digest}"))
    click.echo(_line(f"signed by {bundle.signed_by or '-'}  ({trust})"))
    click.echo(f"hooks     {_dumps([h['hook'] for h in info['hooks']])}")
