#!/bin/sh
# Install Debian's docker-registry (the distribution registry) for the OCI tests, which
# start their own private registry on a free loopback port.
exec "$(dirname "$0")/../setup-debian-server.sh" docker-registry docker-registry
