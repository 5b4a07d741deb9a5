"""Embedding wasmext: a host of plugins, one session, and a hostile plugin contained.

Run after `make plugins`:  .venv/bin/python docs/embed_example.py
"""

from __future__ import annotations

from pathlib import Path

from wasmext import Host, HostConfig, PluginFault, Runtime

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    config = HostConfig(data_dir=ROOT / ".wasmext", workspace_dir=ROOT / "plugins",
                        disabled=frozenset({"extism-counter", "relay-tools"}))  # need grants
    with Host(config) as host, host.session() as s:
        text = "  Write to ANN@example.com   or call +1 (415) 555-0100  "
        result = s.on_plain_text(text)
        print(f"plain text: {result.value!r} (changed by {', '.join(result.changed_by)})")
        print(f"tags:       {s.process_tags('a <upper>loud</upper> word')!r}")
        gate = s.lifecycle("before_tool", tool_name="shell", args={"command": "ls"})
        print(f"before_tool shell: proceed={gate.proceed} ({gate.stop_reason})")

    # One plugin on its own, and a hostile one: the runtime keeps serving.
    with Runtime() as rt:
        loop = rt.load(ROOT / "docs" / "examples" / "hostile" / "infinite-loop.wat",
                       limits={"timeout_ms": 50, "fuel_per_call": 10**10})
        try:
            loop.call("test", "x")
        except PluginFault as fault:
            print(f"hostile:    contained: {fault.reason} ({fault.message})")
        pii = rt.load(ROOT / "plugins" / "pii-mask")
        print(f"afterwards: {pii.call('on_plain_text', 'card 4111 1111 1111 1111').value!r}")


if __name__ == "__main__":
    main()
