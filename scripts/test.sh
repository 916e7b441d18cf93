#!/bin/sh
# The second of the README's two commands: installs what the tests need
# and runs every test tier (unit, privileged jail integration, end-to-end
# over HTTP, fuzz corpora replay, benchmark smoke).
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0
./scripts/check-hygiene.sh
go vet ./...
go test -count=1 -timeout 60m ./...
