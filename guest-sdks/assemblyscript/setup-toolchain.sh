#!/usr/bin/env bash
# Installs the AssemblyScript toolchain for wasmext plugins: node and npm from
# Debian (when missing), then the exact compiler package-lock.json pins, into
# guest-sdks/assemblyscript/node_modules. Idempotent: when everything is in
# place it changes nothing. Run it as root on a fresh Debian machine (CI does);
# with node already installed, any user may run it.
#
#   bash guest-sdks/assemblyscript/setup-toolchain.sh
#
# Only package registries are used: Debian's packages and the npm registry.
set -euo pipefail

SDK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MIN_NODE=18

say() { printf 'setup-toolchain (assemblyscript): %s\n' "$*"; }

node_ok() {
    command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
        node -e "process.exit(+process.versions.node.split('.')[0] >= ${MIN_NODE} ? 0 : 1)"
}

# The compiler version package.json pins, and whether node_modules holds it
# (plus the link under which plugins import the SDK).
pinned() {
    node -e "console.log(require(process.argv[1]).devDependencies.assemblyscript)" \
        "$SDK/package.json"
}

installed() {
    local want have
    want="$(pinned)"
    [ -x "$SDK/node_modules/.bin/asc" ] || return 1
    [ -f "$SDK/node_modules/@wasmext/as-sdk/package.json" ] || return 1
    have="$(node -e "console.log(require(process.argv[1]).version)" \
        "$SDK/node_modules/assemblyscript/package.json" 2>/dev/null || true)"
    [ "$have" = "$want" ]
}

if ! node_ok; then
    if [ "$(id -u)" -ne 0 ]; then
        say "node >= ${MIN_NODE} and npm are needed; run this script as root to install them"
        exit 1
    fi
    say "installing nodejs and npm from Debian"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends nodejs npm
    if ! node_ok; then
        say "node $(node --version 2>/dev/null || echo '(none)') is older than ${MIN_NODE}"
        exit 1
    fi
fi

if installed; then
    say "assemblyscript $(pinned) is already installed in $SDK/node_modules"
    exit 0
fi

say "installing assemblyscript $(pinned) with npm ci"
# --ignore-scripts: nothing in the lock needs an install script.
npm ci --prefix "$SDK" --no-audit --no-fund --ignore-scripts
installed || { say "npm ci finished but the compiler is not in place"; exit 1; }
say "done: $("$SDK/node_modules/.bin/asc" --version)"
