#!/bin/sh
# Fails when the repository tracks build outputs, go.mod is not tidy or Go
# source is not gofmt-formatted:
# run by test.sh, so CI catches both on a clean clone.
set -eu
cd "$(dirname "$0")/.."
PATH="$PATH:/usr/local/go/bin"
if git rev-parse --git-dir >/dev/null 2>&1; then
	bad=$(git ls-files -z | xargs -0 -r sh -c 'for f; do [ -f "$f" ] && [ "$(head -c 4 "$f" | od -An -c | tr -d " ")" = "177ELF" ] && echo "$f"; done; true' _)
	if [ -n "$bad" ]; then
		echo "check-hygiene: build outputs are tracked by git: $bad" >&2
		exit 1
	fi
	unformatted=$(git ls-files -z '*.go' | xargs -0 -r gofmt -l)
	if [ -n "$unformatted" ]; then
		echo "check-hygiene: not gofmt-formatted (run gofmt -w): $unformatted" >&2
		exit 1
	fi
	nm=$(git ls-files | grep -c '/node_modules/' || true)
	if [ "$nm" -gt 0 ]; then
		echo "check-hygiene: $nm files under node_modules are tracked" >&2
		exit 1
	fi
fi
if ! go mod tidy -diff >/dev/null; then
	echo "check-hygiene: go.mod/go.sum are not tidy; run go mod tidy" >&2
	go mod tidy -diff >&2 || true
	exit 1
fi
# The deployment tools are a module of their own (deploy/tools).
if ! (cd deploy/tools && go mod tidy -diff >/dev/null); then
	echo "check-hygiene: deploy/tools/go.mod/go.sum are not tidy; run go mod tidy there" >&2
	exit 1
fi
echo "check-hygiene: ok"
