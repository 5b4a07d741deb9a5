"""The JetStream backend: plugin state in a NATS key-value bucket (nats-server 2.12 or later).

`store` (`JetStreamStore`: the document layout and the StateStore methods) ·
`connection` (`Bucket`: one nats-py connection on a private loop, reads, atomic
batches, every wait bounded by the calling hook's deadline). Imported only when
a JetStream store is configured; it needs the `nats` extra (nats-py).
"""
