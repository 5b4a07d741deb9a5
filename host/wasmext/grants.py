"""What a loaded module is granted beyond its call: the config's `[grants.<id>]`
and the operator's recorded approvals, each only while the module's digest is
the one they were given for (a changed binary must be approved again)."""

from __future__ import annotations

import logging

from wasmext.config import HostConfig
from wasmext.lifecycle.approvals import ApprovalStore
from wasmext.sandbox.backends.extism import ExtismPlugin
from wasmext.sandbox.plugin import Plugin

log = logging.getLogger("wasmext.host")


def apply_grants(config: HostConfig, plugin: Plugin | ExtismPlugin) -> None:
    digest = f"sha256:{plugin.module.info.digest}"
    grant = config.grants.get(plugin.id)
    if grant is not None:
        if grant.digest == digest:
            plugin.set_grants(plugin.grants | grant.capabilities)
        else:
            log.warning("plugin %s changed (digest %s); its grants apply to %s and are "
                        "withheld until renewed", plugin.id, plugin.module.info.digest[:12],
                        grant.digest[7:19])
    recorded = ApprovalStore.in_data_dir(config.data_dir).effective(plugin.id, digest)
    plugin.set_grants(plugin.grants | recorded)
