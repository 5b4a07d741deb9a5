"""The hook kinds: each module implements one kind's ordering, chaining and failure rules.

Runners take a `hooks.context.HookSession` (a protocol the Session implements)
and call plugins through its host; `ordering` holds `Entry` and the order rule.

May import: `wasmext.services`, `wasmext.sandbox`, the building blocks and the
leaves. Never the Session, the Host or a bridge.
"""
