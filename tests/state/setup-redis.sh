#!/bin/sh
# Install Debian's redis-server for the state tests (which start their own private
# server on a free port). Idempotent: does nothing when redis-server is already there.
set -eu
if command -v redis-server >/dev/null 2>&1; then
    echo "redis-server already installed: $(redis-server --version)"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends redis-server
redis-server --version
