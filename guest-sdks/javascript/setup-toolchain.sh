#!/usr/bin/env bash
# Installs the JavaScript toolchain for wasmext plugins: node and npm from
# Debian (when missing), then the exact componentize-js package-lock.json pins, into
# guest-sdks/javascript/node_modules. Idempotent: when everything is in
# place it changes nothing. Run it as root on a fresh Debian machine (CI does);
# with node already installed, any user may run it.
#
#   bash guest-sdks/javascript/setup-toolchain.sh
#
# Only package registries are used: Debian's packages and the npm registry.
set -euo pipefail

SDK="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MIN_NODE=18

say() { printf 'setup-toolchain (javascript): %s\n' "$*"; }

node_ok() {
    command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
        node -e "process.exit(+process.versions.node.split('.')[0] >= ${MIN_NODE} ? 0 : 1)"
}

# The componentize-js version package.json pins, and whether node_modules holds it.
PACKAGE="@bytecodealliance/componentize-js"
pinned() {
    node -e "console.log(require(process.argv[1]).devDependencies[process.argv[2]])" \
        "$SDK/package.json" "$PACKAGE"
}

installed() {
    local have
    have="$(node -e "console.log(require(process.argv[1]).version)" \
        "$SDK/node_modules/$PACKAGE/package.json" 2>/dev/null || true)"
    [ "$have" = "$(pinned)" ]
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
    say "componentize-js $(pinned) is already installed in $SDK/node_modules"
    exit 0
fi

say "installing componentize-js $(pinned) from package-lock.json"
# `npm install`, not `npm ci`: the lock cannot list the optional per-platform
# binaries that are not published for every platform, and `npm ci` refuses a lock
# without them; `npm install` keeps every version the lock pins (and leaves it unchanged).
# --ignore-scripts: the packages ship their binaries (wizer, weval) prebuilt.
npm install --prefix "$SDK" --no-audit --no-fund --ignore-scripts
installed || { say "npm install finished but componentize-js is not in place"; exit 1; }
say "done: componentize-js $(pinned)"
