"""The `wasmext` command line.

Each command's module loads when that command runs. `wasmext --help` lists the
commands from the summaries in COMMANDS, so it imports click and this module
and nothing else: importing every command module would bring in the host, rich,
pathlib, logging and json, more than doubling the start-up cost of a help
screen. tests/cli/test_lazy_commands.py keeps each summary equal to the first
paragraph of its command's docstring and each entry pointing at a command.
"""

from __future__ import annotations

import importlib

import click

from wasmext_cli.group import WasmextGroup

__all__ = ["COMMANDS", "main"]

_PLUGIN = "wasmext_cli.plugin_cmd"
_LIFECYCLE = "wasmext_cli.lifecycle_cmd"

# name: (module, attribute, first paragraph of the command's docstring)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "build": ("wasmext_cli.build_cmd", "build",
              "Build each plugin folder (default: the current folder) into its .wasm."),
    "call": (_PLUGIN, "call", "Call HOOK of PLUGIN (a plugin folder or a .wasm file) and print"
             " its value as JSON."),
    "config": ("wasmext_cli.config_cmd", "config", "Set a plugin's settings (checked against"
               " its plugin.toml, saved atomically)."),
    "disable": (_PLUGIN, "disable", "Disable PLUGIN_ID (remembered across restarts)."),
    "docs": ("wasmext_cli.docs_cmd", "docs", "List the guides, or print one (TOPIC: a page's"
             " name, e.g. cluster or spec)."),
    "enable": (_PLUGIN, "enable", "Enable PLUGIN_ID (remembered across restarts)."),
    "extensions": ("wasmext_cli.extensions_cmd", "extensions", "Output extensions (#name):"
                   " users' activations, saved turns, user copies."),
    "grant": (_LIFECYCLE, "grant", "Grant CAPABILITIES to PLUGIN_ID's current module (recorded"
              " with who and when)."),
    "grants": (_LIFECYCLE, "grants", "List recorded approvals, and whether each still covers"
               " the plugin as installed (module, plugin.toml and the files it makes the host"
               " run); if not, what changed."),
    "inspect": (_PLUGIN, "inspect", "Show what PLUGIN (a folder, a .wasm, or a .wxb bundle)"
                " registered, its ABI version, size, digest and limits."),
    "install": (_LIFECYCLE, "install", "Check SOURCE (a BUNDLE.wxb, or oci://REGISTRY/NAME:TAG"
                " or @sha256:...) and its signature, if the config requires one, and install"
                " it."),
    "keygen": (_LIFECYCLE, "keygen", "Make an Ed25519 signing key; prints the public key for"
               " [trust] keys."),
    "limits": (_PLUGIN, "limits", "Print the default sandbox limits."),
    "list": (_PLUGIN, "list_plugins", "List loaded plugins and the effective order of every"
             " hook."),
    "mcp": ("wasmext_cli.mcp_cmd", "mcp", "Serve (or inspect) tools over MCP."),
    "nats": ("wasmext_cli.nats_cmd", "nats", "Inspect extensions served over NATS."),
    "new": (_PLUGIN, "new", "Create a plugin project NAME in LANG that builds and passes its"
            " test."),
    "pack": (_LIFECYCLE, "pack", "Pack a built plugin FOLDER into one bundle: plugin.toml,"
             " module, README, digests."),
    "push": (_LIFECYCLE, "push", "Publish SOURCE (a built plugin FOLDER or a BUNDLE.wxb) at"
             " REFERENCE, oci://REGISTRY/NAME:TAG, as a wasmext plugin artifact."),
    "revoke": (_LIFECYCLE, "revoke", "Revoke recorded CAPABILITIES of PLUGIN_ID (all of them"
               " when none is named)."),
    "run": ("wasmext_cli.run_cmd", "run", "Drive an agent session through the plugins and show"
            " what each one did."),
    "sign": (_LIFECYCLE, "sign", "Sign BUNDLE's digest manifest with KEY (a signature never"
             " grants a capability)."),
    "state": ("wasmext_cli.state_cmd", "state", "Inspect, back up and move plugin state."),
    "stats": ("wasmext_cli.run_cmd", "stats", "Run a session like `run` and print per-plugin"
              " calls, latency, fuel, faults, state."),
    "uninstall": (_LIFECYCLE, "uninstall", "Unload PLUGIN_ID and remove its folder (and, with"
                  " --purge-state, its state)."),
    "worker": ("wasmext_cli.nats_cmd", "worker", "Serve the plugins (each whole, and its"
               " pipeline stages) as NATS services until SIGTERM (then drain)."),
}


class LazyGroup(WasmextGroup):
    """A group whose commands are imported on first use, named by COMMANDS."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, loaded or not, sorted."""
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, imported on first use."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attribute, _summary = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command), (module, attribute)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the commands with their summaries, without importing them."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            if name in COMMANDS:
                # click's own shortening, run on the summary instead of the loaded command
                stand_in = click.Command(name, help=COMMANDS[name][2])
                rows.append((name, stand_in.get_short_help_str(limit)))
            elif not self.commands[name].hidden:
                rows.append((name, self.commands[name].get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="wasmext")
def main() -> None:
    """Run sandboxed WebAssembly plugins."""
