#!/bin/sh
# The first of the README's two commands: installs everything airlock needs
# on a fresh Debian 12 machine with Go, builds it, checks the host with
# `airlock doctor` and runs the demo.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
install -m 0755 bin/airlock /usr/local/bin/airlock
echo "installed /usr/local/bin/airlock"
bin/airlock doctor
./scripts/demo.sh
