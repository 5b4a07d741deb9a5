#!/bin/sh
# Install Debian's redis-server for the state tests (which start their own private
# server on a free port).
exec "$(dirname "$0")/../setup-debian-server.sh" redis-server redis-server
