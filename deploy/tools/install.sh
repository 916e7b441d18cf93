#!/bin/sh
# Builds the deployment tools at the versions this module's go.mod pins
# (helm, kubeconform, and this module's ociimage, k8sschemas and yaml2json) into
# $AIRLOCK_DEPLOY_CACHE/bin and prints that directory. They are a module of
# their own so that airlock's go.mod never carries them. The first build
# downloads from the Go module proxy and takes a minute or more; later runs
# find everything in Go's build cache and take about a second.
set -eu
cd "$(dirname "$0")"
PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0
cache=${AIRLOCK_DEPLOY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airlock-deploy}
bin=$cache/bin
mkdir -p "$bin"
ver() { go list -m -f '{{.Version}}' "$1"; }
# Their version commands say what go.mod pinned (their Makefiles set these).
GOBIN=$bin go install -trimpath -ldflags "-X helm.sh/helm/v3/internal/version.version=$(ver helm.sh/helm/v3)" helm.sh/helm/v3/cmd/helm
GOBIN=$bin go install -trimpath -ldflags "-X main.version=$(ver github.com/yannh/kubeconform)" github.com/yannh/kubeconform/cmd/kubeconform
GOBIN=$bin go install -trimpath ./ociimage ./k8sschemas ./yaml2json
echo "$bin"
