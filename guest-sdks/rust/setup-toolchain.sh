#!/usr/bin/env bash
# Install the toolchain of the Rust guest SDK on a fresh Debian machine (run
# as root): Debian's rustc with the standard library for wasm32, and the
# linker rust-lld (a link to lld, which libstd-rust-dev-wasm32 recommends, so
# recommends stay on), and cargo, with which CI checks that the SDK crate packages
# (`cargo package --offline`; builds use rustc directly). No crates, no rustup: everything comes from the Debian
# archive. Idempotent: does nothing when compiler, wasm32 standard library and
# linker are there.
set -euo pipefail

RUSTC=/usr/bin/rustc
TARGET=wasm32-unknown-unknown

have_toolchain() {
    [ -x "$RUSTC" ] || return 1
    [ -x /usr/bin/rust-lld ] || return 1
    command -v cargo >/dev/null 2>&1 || return 1
    local sysroot
    sysroot="$("$RUSTC" --print sysroot 2>/dev/null)" || return 1
    compgen -G "$sysroot/lib/rustlib/$TARGET/lib/libstd-*.rlib" >/dev/null
}

if have_toolchain; then
    echo "rust toolchain present: $("$RUSTC" --version) with $TARGET"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y rustc libstd-rust-dev-wasm32 cargo

if ! have_toolchain; then
    echo "rustc or its $TARGET standard library is still missing" >&2
    exit 1
fi
echo "installed: $("$RUSTC" --version) with $TARGET"
