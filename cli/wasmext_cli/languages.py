"""The one table of guest languages: how each builds and how `wasmext new` scaffolds it.

Adding a language is one entry here: the builder (a module exposing
`commands(spec, plugin_dir, out) -> list[list[str]]`, raising
`build.ToolchainMissing` with the install command when its toolchain is absent)
and, when authors may start a project in it, the SDK folder whose
`examples/hello` is the template and the writer of the language's own project
files (scaffold_native.py).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LANGUAGES", "SCAFFOLD_LANGUAGES", "Language"]


@dataclass(frozen=True)
class Language:
    """A plugin language: its builder, SDK, template and native project files."""

    name: str
    builder: str  # "module:function" building the plugin's steps
    sdk: str | None = None  # guest-sdks/<sdk>; None: no wasmext SDK (nothing to scaffold)
    template: str = "examples/hello"  # inside the SDK folder
    project: str | None = None  # "module:function" writing native files (Cargo.toml ...)


def _entry(name: str, builder: str, project: str | None = None, sdk: str | None = "") -> Language:
    return Language(name, builder, name if sdk == "" else sdk, project=project)


LANGUAGES: dict[str, Language] = {lang.name: lang for lang in (
    _entry("c", "wasmext_cli.build:c_steps", "wasmext_cli.scaffold_native:c_project"),
    _entry("zig", "wasmext_cli.build:zig_steps", "wasmext_cli.scaffold_native:zig_project"),
    _entry("rust", "wasmext_cli.build.rust:commands",
           "wasmext_cli.scaffold_native:rust_project"),
    _entry("assemblyscript", "wasmext_cli.build.assemblyscript:commands",
           "wasmext_cli.scaffold_native:assemblyscript_project"),
    _entry("go", "wasmext_cli.build.go:commands", "wasmext_cli.scaffold_native:go_project"),
    # Components (Python and JavaScript): the SDK is vendored, the project is its sources
    # (and, for JavaScript, a package.json pinning componentize-js).
    _entry("python", "wasmext_cli.build.python:commands",
           "wasmext_cli.scaffold_native:python_project"),
    _entry("javascript", "wasmext_cli.build.javascript:commands",
           "wasmext_cli.scaffold_native:javascript_project"),
    _entry("extism-assemblyscript", "wasmext_cli.build.extism_assemblyscript:commands",
           sdk=None),
)}

SCAFFOLD_LANGUAGES = tuple(name for name, lang in LANGUAGES.items() if lang.sdk is not None)
