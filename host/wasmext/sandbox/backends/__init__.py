"""Module kinds besides native ABI v1 (which is `wasmext.sandbox.plugin`).

`extism`: modules built with an Extism PDK, run with the Extism kernel under
the same budgets. A component-model backend belongs here too.

May import: the rest of `wasmext.sandbox`, `wasmext.errors`, `wasmext._abi`.
"""
