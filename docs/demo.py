"""The README's main job: `wasmext run` on the example plugins, then a tour.

`make demo` builds the example plugins and runs this. Every step is a real
`wasmext` command, printed before it runs, so it can be copied. The first is
the agent session that shows every hook kind firing.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = "docs/examples/hostile"

STEPS: list[tuple[str, list[str], bool]] = [
    ("An agent session through every example plugin (replayed transcript)",
     ["run", "docs/examples/transcript.json", "--config", "docs/examples/wasmext.toml",
      "--policy", "docs/examples/policy.toml"], True),
    ("What a plugin registered", ["inspect", "plugins/pii-mask"], True),
    ("Mask personal data (C plugin)",
     ["call", "plugins/pii-mask", "on_plain_text", "--data",
      '"Write to ann@example.com, call +1 (415) 555-0100, card 4111 1111 1111 1111."'], True),
    ("Normalize text (Zig plugin, settings from the command line)",
     ["call", "plugins/normalize-text", "on_plain_text", "--set", "lowercase=true",
      "--set", "emoji=strip", "--data", '"  Hello   WORLD 😀  from   wasmext  "'], True),
    ("Check that an answer is JSON (Python plugin, a WebAssembly component)",
     ["call", "plugins/json-check", "output_extension", "--data",
      '{"name": "json", "param": "name,age", "answer": "{\\"name\\": \\"Ada\\"}", '
      '"query": "q", "previous": {}}'], True),
    ("The C SDK's hello plugin", ["call", "guest-sdks/c/examples/hello", "greet", "--data",
                                  '"Ada"', "--log"], True),
    ("The Zig SDK's hello plugin", ["call", "guest-sdks/zig/examples/hello", "greet",
                                    "--set", "greeting=Servus", "--data", '"Grace"'], True),
    ("A plugin that never returns: stopped by the wall clock",
     ["call", f"{HOSTILE}/infinite-loop.wat", "test", "--timeout-ms", "100",
      "--fuel", "100000000000"], False),
    ("The same plugin under a fuel budget",
     ["call", f"{HOSTILE}/infinite-loop.wat", "test", "--fuel", "1000000"], False),
    ("A plugin that eats memory: stopped at the cap",
     ["call", f"{HOSTILE}/memory-bomb.wat", "test", "--memory-mb", "16"], False),
    ("A plugin that points outside its memory: never read",
     ["call", f"{HOSTILE}/escape-pointer.wat", "test"], False),
]


def main() -> int:
    failures = 0
    for title, args, should_succeed in STEPS:
        print(f"\n## {title}\n$ wasmext {shlex.join(args)}", flush=True)
        proc = subprocess.run([sys.executable, "-m", "wasmext_cli", *args], cwd=ROOT,
                              capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        sys.stdout.write(proc.stderr)
        if (proc.returncode == 0) != should_succeed:
            print(f"!! expected {'success' if should_succeed else 'a contained fault'}, "
                  f"got exit {proc.returncode}")
            failures += 1
    print(f"\n{len(STEPS) - failures} of {len(STEPS)} steps behaved as expected; "
          "the hostile plugins were contained and the host kept serving.")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
