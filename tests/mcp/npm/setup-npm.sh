#!/usr/bin/env bash
# The third-party MCP peers the interop tests drive (pinned in package-lock.json):
# the reference "everything" server, the TypeScript SDK and the MCP Inspector (CLI mode).
# Run by `make toolchains` (as root in CI); installs node first when it is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v npm >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
cd "$here"
# Idempotent: npm records what it installed; reinstall only when the lock changed.
if [ -f node_modules/.package-lock.json ] && [ node_modules/.package-lock.json -nt package-lock.json ]; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
