#!/bin/sh
# Builds the single static airlock binary into bin/airlock (or $1), with
# the sandbox init built first from the same sources and embedded in it
# (cmd/airlock-init, package exeseal). Both get one build stamp: a SHA-256
# of every source file they are compiled from (named by import path, so
# the stamp is the same in any checkout or module cache), the Go version
# and the flags; the airlock binary refuses an embedded init without its
# stamp. $VERSION overrides the version (git describe's by default);
# `build.sh --stamp` prints the stamp alone. The container image
# (deploy/image) is built with this script too.
# A plain `go build ./cmd/airlock` works too: it embeds no init and
# re-executes itself as every sandbox's init (slower to start, more
# memory per sandbox).
set -eu
cd "$(dirname "$0")/.."
PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0
out=${1:-bin/airlock}
version=${VERSION:-$(git describe --always --dirty 2>/dev/null || echo dev)}
flags="-trimpath -ldflags=-s -w"
init=internal/exeseal/airlock-init
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tab=$(printf '\t')

# stamp hashes the files the two binaries are compiled from, each named by
# its package's import path, never by where the checkout, GOROOT or the
# module cache is (the paths differ from one machine to the next).
stamp() {
	go list -deps -f '{{$d := .Dir}}{{$p := .ImportPath}}{{range .GoFiles}}{{$d}}/{{.}}	{{$p}}/{{.}}
{{end}}{{range .SFiles}}{{$d}}/{{.}}	{{$p}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}	{{$p}}/{{.}}
{{end}}' ./cmd/airlock ./cmd/airlock-init | sort -t "$tab" -k2,2 -u >"$work/files"
	cut -f1 "$work/files" | tr '\n' '\0' | xargs -0 sha256sum | cut -c1-64 >"$work/sums"
	cut -f2 "$work/files" | paste -d ' ' "$work/sums" - >"$work/named"
	{
		go version
		echo "$flags"
		cat "$work/named"
	} | sha256sum | cut -c1-64
}

if [ "${1:-}" = --stamp ]; then
	stamp
	exit
fi
# The init must be at its one embedded path while the airlock binary is
# built: two builds in one checkout take turns (a lock on the directory
# itself, released when this shell exits, however it exits).
exec 9<internal/exeseal
flock 9
trap 'rm -rf "$init" "$work"' EXIT
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
