"""The files that make a scaffolded plugin a native project of its language.

`wasmext new` copies the SDK into the project (./wasmext-sdk, which
`wasmext build` then compiles against) and calls the language's writer here,
so the language's own tools and editors work in the folder: cargo, go, npm,
zig build, clangd. Each writer returns {relative path: text}.
"""

from __future__ import annotations

import json
import secrets
import zlib
from pathlib import Path

from wasmext_cli.build import VENDORED_SDK

__all__ = ["assemblyscript_project", "c_project", "go_project", "javascript_project",
           "python_project", "rust_project", "zig_project"]

Files = dict[str, str]


def _gitignore(*extra: str) -> str:
    """Built modules, their temporaries and build stamps, and the language's own output."""
    return "".join(f"{line}\n" for line in ("*.wasm", "*.wasm.tmp", ".*.wasm.stamp", *extra,
                                             "__pycache__/"))


def _snake(name: str) -> str:
    return name.replace("-", "_")


def c_project(name: str, project: Path) -> Files:
    """A C project's native files: compile_flags.txt for editors, .gitignore."""
    # clangd and other editors read this; `wasmext build` is the build.
    return {"compile_flags.txt": f"--target=wasm32-wasi\n-std=c11\n-I{VENDORED_SDK}/include\n",
            ".gitignore": _gitignore()}


def zig_fingerprint(package: str) -> int:
    """A build.zig.zon fingerprint: a random id below the name's CRC32, as `zig init` makes."""
    while True:
        ident = secrets.randbits(32)
        if ident not in (0, 0xFFFFFFFF):
            return (zlib.crc32(package.encode()) << 32) | ident


def zig_project(name: str, project: Path) -> Files:
    """A Zig project's native files: build.zig, build.zig.zon, .gitignore."""
    root = next(p.name for p in sorted(project.glob("*.zig")))
    package = _snake(name)
    build_zig = f"""//! `zig build` writes zig-out/bin/{name}.wasm (`wasmext build`: ./{name}.wasm).
const std = @import("std");

pub fn build(b: *std.Build) void {{
    const target = b.resolveTargetQuery(.{{ .cpu_arch = .wasm32, .os_tag = .wasi }});
    const optimize = b.standardOptimizeOption(.{{ .preferred_optimize_mode = .ReleaseSmall }});
    const sdk = b.createModule(.{{
        .root_source_file = b.path("{VENDORED_SDK}/src/wasmext.zig"),
        .target = target,
        .optimize = optimize,
    }});
    const exe = b.addExecutable(.{{
        .name = "{name}",
        .root_module = b.createModule(.{{
            .root_source_file = b.path("{root}"),
            .target = target,
            .optimize = optimize,
            .imports = &.{{.{{ .name = "wasmext", .module = sdk }}}},
        }}),
    }});
    exe.entry = .disabled;
    exe.rdynamic = true;
    b.installArtifact(exe);
}}
"""
    zon = f""".{{
    .name = .{package},
    .version = "0.1.0",
    .fingerprint = 0x{zig_fingerprint(package):x},
    .minimum_zig_version = "0.14.0",
    .paths = .{{ "build.zig", "build.zig.zon", "{root}", "{VENDORED_SDK}" }},
}}
"""
    return {"build.zig": build_zig, "build.zig.zon": zon,
            ".gitignore": _gitignore(".zig-cache/", "zig-out/")}


def rust_project(name: str, project: Path) -> Files:
    """A Rust project's native files: Cargo.toml, .gitignore."""
    root = next(p.name for p in sorted(project.glob("*.rs")))
    cargo = f"""[package]
name = "{name}"
version = "0.1.0"
edition = "2021"
publish = false

[lib]
crate-type = ["cdylib"]
path = "{root}"

[dependencies]
wasmext = {{ path = "{VENDORED_SDK}" }}

# `cargo build --release --target wasm32-unknown-unknown` gives the same kind of module
# as `wasmext build` (which drives rustc directly with these settings).
[profile.release]
opt-level = 2
panic = "abort"
lto = "fat"
codegen-units = 1
strip = "symbols"

# A project of its own, even inside another cargo workspace.
[workspace]
"""
    return {"Cargo.toml": cargo,
            ".gitignore": _gitignore("target/")}


def go_project(name: str, project: Path) -> Files:
    """A Go project's native files: go.mod, .gitignore."""
    from wasmext_cli.build.go import GO_MIN, SDK_MODULE

    gomod = f"""module example.com/{name}

go {GO_MIN[0]}.{GO_MIN[1]}

require {SDK_MODULE} v0.0.0

replace {SDK_MODULE} => ./{VENDORED_SDK}
"""
    return {"go.mod": gomod, ".gitignore": _gitignore()}


def assemblyscript_project(name: str, project: Path) -> Files:
    """An AssemblyScript project's native files: package.json, .gitignore."""
    sdk = json.loads((project / VENDORED_SDK / "package.json").read_text(encoding="utf-8"))
    package = {
        "name": name,
        "version": "0.1.0",
        "private": True,
        "description": f"{name}: a wasmext plugin in AssemblyScript",
        "scripts": {"build": "wasmext build", "test": "python -m pytest"},
        "dependencies": {
            sdk["name"]: f"file:{VENDORED_SDK}",
            "assemblyscript": sdk["devDependencies"]["assemblyscript"],
        },
    }
    return {"package.json": json.dumps(package, indent=2) + "\n",
            ".gitignore": _gitignore("node_modules/")}


def javascript_project(name: str, project: Path) -> Files:
    """A JavaScript project's native files: package.json, .gitignore."""
    # componentize-js is resolved from the project's node_modules (node walks up from
    # ./wasmext-sdk/componentize.mjs); `wasmext build` runs `npm install` when it is missing.
    sdk = json.loads((project / VENDORED_SDK / "package.json").read_text(encoding="utf-8"))
    package = {
        "name": name,
        "version": "0.1.0",
        "private": True,
        "type": "module",
        "description": f"{name}: a wasmext plugin in JavaScript",
        "scripts": {"build": "wasmext build", "test": "python -m pytest"},
        "devDependencies": dict(sdk["devDependencies"]),
    }
    return {"package.json": json.dumps(package, indent=2) + "\n",
            ".gitignore": _gitignore("node_modules/")}


def python_project(name: str, project: Path) -> Files:
    """A Python project's native files: .gitignore."""
    return {".gitignore": _gitignore()}
