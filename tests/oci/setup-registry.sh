#!/bin/sh
# Install Debian's docker-registry (the distribution registry) for the OCI tests, which
# start their own private registry on a free loopback port. Idempotent: does nothing
# when docker-registry is already there.
set -eu
if command -v docker-registry >/dev/null 2>&1; then
    echo "docker-registry already installed: $(docker-registry --version)"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends docker-registry
docker-registry --version
