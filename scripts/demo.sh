#!/bin/sh
# The demo: a data-science script in a fresh jail, then attacks that fail.
set -eu
cd "$(dirname "$0")/.."
A=bin/airlock
echo
echo "== airlock run examples/demo.py (numpy, pandas, scikit-learn, a matplotlib PNG)"
$A run --json examples/demo.py
echo
echo "== the same under a 100 MB memory limit: the sandbox is killed, out of memory"
$A run --memory 100M --timeout 5s examples/demo.py || true
echo
echo "== attacks are contained (see tests for the full list)"
$A run --timeout 2s examples/escape.py || true
