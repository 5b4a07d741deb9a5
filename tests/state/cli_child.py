"""The victim of test_state_cli_crash.py: `wasmext ...` commands in forked children.

    python cli_child.py             (a zygote: reads commands on stdin)
    run <cwd> <json argv>       ->  forks `wasmext <argv>` in <cwd>, answers its pid
    reap <pid>                  ->  waits for it, answers its wait status

The zygote imports the CLI, its state commands, the config file's schema, the
stores and their clients once (and opens nothing), so that each command starts in a
millisecond and a kill lands inside the command's work rather than in Python's
start-up. The CLI imports most of these only when a command needs them, so the
zygote names them itself (a fork that imported them for each command took longer
than the calibration runs suggested, and fewer than half the runs were killed).
"""

from __future__ import annotations

import json
import os
import sys

import redis  # noqa: F401  (imported once, for the forks)

# The stores and what the CLI imports inside its commands, once, for the forks.
import wasmext.config
import wasmext.configfile
import wasmext.state.jetstream.store
import wasmext.state.redis.store
import wasmext.state.sqlite
import wasmext_cli.state_cmd  # noqa: F401
from wasmext_cli.main import main

wasmext.config.parse_config({})  # the schema's models are built on first use


def command(cwd: str, argv: list[str]) -> None:
    os.chdir(cwd)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        main(argv, prog_name="wasmext", standalone_mode=True)
    except SystemExit as exc:
        os._exit(exc.code if isinstance(exc.code, int) else 1)
    os._exit(0)


def zygote() -> None:
    for line in sys.stdin:
        cmd, _, rest = line.strip().partition(" ")
        if cmd == "run":
            cwd, _, argv = rest.partition(" ")
            pid = os.fork()
            if pid == 0:
                try:
                    command(cwd, json.loads(argv))
                finally:
                    os._exit(70)
            print(pid, flush=True)
        elif cmd == "reap":
            print(os.waitpid(int(rest), 0)[1], flush=True)


if __name__ == "__main__":
    zygote()
