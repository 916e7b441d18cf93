#!/bin/sh
# The second of the README's two commands: installs what the tests need
# and runs every test tier (unit, privileged jail integration, end-to-end
# over HTTP, fuzz corpora replay, benchmark smoke, and the deployment
# artifacts: chart, router and image, see deploy/doc.go).
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --tests
PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0
# The deployment tests build helm and kubeconform (Go module proxy) and the
# image (debootstrap from Debian's mirror): slow the first time, cached
# afterwards, so a developer's plain `go test ./...` skips them and says
# why. Here they run, and a missing tool is a failure, never a skip.
export AIRLOCK_TEST_DEPLOY=1
# Every tier runs: a test that would skip here (not root, a tool missing)
# fails instead (internal/testenv).
export AIRLOCK_TEST_STRICT=1
./scripts/check-hygiene.sh
# gVisor's runsc, pinned (internal/gvisor.PinnedVersion), built from the Go
# module proxy into a directory of the tests' own: minutes the first time,
# a build-cache hit afterwards. It never enters airlock's go.mod. The
# gVisor tests run against it (and, strict, fail without it).
RUNSC_BIN="${AIRLOCK_TEST_TOOLS:-$HOME/.cache/airlock-tools}/bin"
mkdir -p "$RUNSC_BIN"
GOBIN="$RUNSC_BIN" go install "gvisor.dev/gvisor/runsc@$(sed -n 's/^const PinnedVersion = "\(.*\)"$/\1/p' internal/gvisor/gvisor.go)"
export AIRLOCK_TEST_RUNSC="$RUNSC_BIN/runsc"
# The agent libraries the end-to-end tests drive (MCP client, LangChain JS,
# OpenAI Agents, Vercel AI) and E2B's SDKs, pinned in the committed lockfiles.
(cd e2e/agents && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
(cd e2e/e2b && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
go vet ./...
(cd deploy/tools && go vet ./...)
# One package at a time: the privileged tiers check the whole host for
# leaks (mounts, cgroups, changes to /run and /tmp), which another
# package's servers running at the same moment would trip.
go test -p 1 -count=1 -timeout 60m ./...
# Every benchmark once, as a test: one that no longer runs (a helper it
# calls changed under it) fails here, not the day someone measures.
go test -p 1 -count=1 -run '^$' -bench . -benchtime 1x ./...
