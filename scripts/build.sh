#!/bin/sh
# Builds the single static airlock binary into bin/airlock (or $1), with
# the sandbox init built first from the same sources and embedded in it
# (cmd/airlock-init, package exeseal). Both get one build stamp: a SHA-256
# of every source file they are compiled from, the Go version and the
# flags; the airlock binary refuses an embedded init without its stamp.
# A plain `go build ./cmd/airlock` works too: it embeds no init and
# re-executes itself as every sandbox's init (slower to start, more
# memory per sandbox).
set -eu
cd "$(dirname "$0")/.."
PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0
out=${1:-bin/airlock}
version=$(git describe --always --dirty 2>/dev/null || echo dev)
flags="-trimpath -ldflags=-s -w"
init=internal/exeseal/airlock-init
trap 'rm -f "$init"' EXIT

# stamp hashes the files the two binaries are compiled from.
stamp() {
	{
		go version
		echo "$flags"
		go list -deps -f '{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .SFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}' ./cmd/airlock ./cmd/airlock-init | sort -u | tr '\n' '\0' | xargs -0 sha256sum
	} | sha256sum | cut -c1-64
}

before=$(stamp)
go build -trimpath -ldflags "-s -w -X main.stamp=airlock-init-stamp:$before" -o "$init" ./cmd/airlock-init
go build -trimpath -tags airlock_initexe \
	-ldflags "-s -w -X main.version=$version -X airlock/internal/exeseal.initStamp=airlock-init-stamp:$before" \
	-o "$out" ./cmd/airlock
if [ "$(stamp)" != "$before" ]; then
	rm -f "$out"
	echo "build.sh: the sources changed during the build; run it again" >&2
	exit 1
fi
echo "built $out"
