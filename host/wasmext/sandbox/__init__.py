"""The sandbox: everything that runs one untrusted module, and nothing else.

Lives here: the shared wasmtime engine and its epoch ticker (`engine`), the
authenticated compile cache (`cache`), module checks and compilation (`module`),
one instance under its budgets (`instance`, `fastcall`, `limits`), the
`host_call` link and op table (`hostlink`, `hostcalls`), the MessagePack codec
(`codec`), the plugin log (`pluginlog`), a plugin with its registration and
instance pool (`plugin`) and the other module kinds in `backends`.

May import: `wasmext.errors`, `wasmext._abi` and the standard library. Never a
service, a hook, the host or a bridge: the sandbox does not know what a hook
means, only how to run one call inside its budget.
"""
