#!/bin/sh
# Builds the single static airlock binary into bin/airlock.
set -eu
cd "$(dirname "$0")/.."
PATH="$PATH:/usr/local/go/bin"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$(git describe --always --dirty 2>/dev/null || echo dev)" -o bin/airlock ./cmd/airlock
echo "built bin/airlock"
