"""Extensions as services across hosts over NATS (docs/cluster.md).

`contract` (CP-Ext and CP2 messages, JSON or MessagePack), `registry` (where each
remote extension lives), `remote` (calling one, with timeout, retry and a circuit
breaker), `routing` (a policy whose stages may be remote, tenant overrides),
`worker` (serving a host's pipeline stages), `bridge` (events onto NATS subjects).
Only `link`, `remote`, `worker`, `bridge` and `ops` import nats-py, and only when used.
"""
