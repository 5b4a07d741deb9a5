"""Host services: what a guest may ask the host for, one module per op family.

`state` (state.* ops over a `wasmext.state` store), `events` (event.emit,
subscriptions and delivery over the `wasmext.observe` bus), `tools` (the tool
registry and tool.call). The op table itself (`HostServices`, with the
config, secret, log and abi ops every plugin has) is the sandbox's
`hostcalls`; each service installs its handlers into it. What a service needs
of the host is the small protocol in `hostview`, never the Host class.

May import: `wasmext.sandbox`, `wasmext.state`, `wasmext.observe`,
`wasmext.errors`. Never `wasmext.hooks`, the host modules or a bridge.
"""
