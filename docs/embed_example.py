"""Embedding wasmext: load plugins, call hooks, survive a hostile one.

Run after `make plugins`:  .venv/bin/python docs/embed_example.py
"""

from __future__ import annotations

from pathlib import Path

from wasmext import PluginError, PluginFault, Runtime

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def main() -> None:
    with Runtime() as rt:
        pii = rt.load(ROOT / "plugins" / "pii-mask")
        norm = rt.load(ROOT / "plugins" / "normalize-text", settings={"lowercase": True})
        text = "  Write to ANN@example.com   or call +1 (415) 555-0100  "
        for plugin in (pii, norm):
            result = plugin.call("on_plain_text", text)
            if result.changed:
                text = result.value
            print(f"{plugin.id:>15}: {text!r}")

        loop = rt.load(HERE / "examples" / "hostile" / "infinite-loop.wat",
                       limits={"timeout_ms": 50, "fuel_per_call": 10**10})
        try:
            loop.call("test", text)
        except PluginFault as fault:
            print(f"{loop.id:>15}: contained: {fault.reason} ({fault.message})")
        except PluginError as err:
            print(f"{loop.id:>15}: the plugin said no: {err.code}")

        # The runtime keeps serving after the fault.
        print(f"{pii.id:>15}: {pii.call('on_plain_text', 'card 4111 1111 1111 1111').value!r}")


if __name__ == "__main__":
    main()
