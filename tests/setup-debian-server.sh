#!/bin/sh
# Usage: setup-debian-server.sh COMMAND PACKAGE
# Install a Debian package that provides a server the tests start themselves (on a
# free loopback port), unless COMMAND is already on PATH. Idempotent.
set -eu
cmd=$1
package=$2
if command -v "$cmd" >/dev/null 2>&1; then
    echo "$cmd already installed: $("$cmd" --version)"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends "$package"
"$cmd" --version
