"""Extensions as services across hosts over NATS (docs/cluster.md).

`contract` (CP-Ext and CP2 messages, JSON or MessagePack), `registry` (where each
remote extension lives), `remote` (calling one, with timeout, retry and a circuit
breaker), `routing` (a policy whose stages may be remote, tenant overrides),
`worker` (serving a host's plugins whole and their pipeline stages; `served` is its
side of a whole plugin), `plugins` (a host calling a plugin workers serve as if it were
local: `[remote.ID]`), `bridge` (events onto NATS subjects).
Only `link`, `remote`, `plugins`, `worker`, `bridge` and `ops` import nats-py, and only
when used.
"""
