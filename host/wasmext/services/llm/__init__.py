"""The host's model on a plugin's behalf: the `llm.complete` op under budgets.

`service` (the op: model allowlist, token budgets, prices, usage it can trust) ·
`client` (one chat completion from an OpenAI-compatible endpoint) · `ledger`
(tokens each plugin spent today, kept in the state store) · `config` (the `[llm]`
section).
"""
