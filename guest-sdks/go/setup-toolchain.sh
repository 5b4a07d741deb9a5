#!/usr/bin/env bash
# Installs the toolchain of the wasmext Go SDK on Debian, as root: a `go` of
# version 1.24 or newer (//go:wasmexport, GOOS=wasip1 c-shared builds).
#
# Idempotent: when a suitable `go` is on PATH (or at /usr/local/go/bin/go) it
# does nothing. Otherwise it installs Debian's golang-go; a release whose Go
# is older than 1.24 gets a clear message instead of a download from elsewhere.
set -euo pipefail

NEED_MINOR=24  # go1.24: //go:wasmexport

find_go() {
    command -v go 2>/dev/null || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; } || true
}

# Minor version of Go 1.x at $1 (0 when it cannot tell).
go_minor() {
    local v
    v="$(GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null || "$1" version 2>/dev/null || true)"
    v="$(grep -oE 'go1\.[0-9]+' <<<"$v" | head -n1 || true)"
    echo "${v#go1.}" | grep -E '^[0-9]+$' || echo 0
}

has_go() {
    local go
    go="$(find_go)"
    [ -n "$go" ] && [ "$(go_minor "$go")" -ge "$NEED_MINOR" ]
}

if has_go; then
    echo "wasmext Go SDK: $("$(find_go)" version) is installed; nothing to do."
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "setup-toolchain.sh: run as root (it uses apt-get)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends golang-go
hash -r
if has_go; then
    echo "wasmext Go SDK: installed $("$(find_go)" version) from Debian."
    exit 0
fi
echo "setup-toolchain.sh: this Debian's Go is older than 1.$NEED_MINOR; install Go 1.$NEED_MINOR" \
     "or newer (the Go SDK's tests are skipped without it)" >&2
exit 1
