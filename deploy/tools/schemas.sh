#!/bin/sh
# Generates the JSON schemas kubeconform validates against, offline, from
# the OpenAPI document the k8s.io/kubernetes module ships
# (api/openapi-spec/swagger.json; fetched through the Go module proxy and
# checked against the checksum database like any module), and prints the
# directory to give kubeconform as -schema-location. The schemas are never
# committed: they are generated into $AIRLOCK_DEPLOY_CACHE/schemas, once
# per Kubernetes version and generator.
#
#   deploy/tools/schemas.sh            # Kubernetes 1.37.2
#   K8S_VERSION=1.36.4 deploy/tools/schemas.sh
set -eu
cd "$(dirname "$0")"
PATH="$PATH:/usr/local/go/bin"
version=${K8S_VERSION:-1.37.2}
cache=${AIRLOCK_DEPLOY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airlock-deploy}
bin=$(./install.sh) # prints only its directory
key=$( (cat k8sschemas/main.go; echo "$version") | sha256sum | cut -c1-12)
out=$cache/schemas/$version-$key
if [ ! -d "$out" ]; then
	mod=$(go mod download -json "k8s.io/kubernetes@v$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	if [ -z "$mod" ]; then
		echo "schemas.sh: could not download k8s.io/kubernetes@v$version" >&2
		exit 1
	fi
	rm -rf "$out.tmp"
	"$bin/k8sschemas" -spec "$mod/api/openapi-spec/swagger.json" -out "$out.tmp" -kube-version "$version" >&2
	mv "$out.tmp" "$out"
	# Older versions and generators go.
	for d in "$cache/schemas/"*; do
		[ "$d" = "$out" ] || rm -rf "$d"
	done
fi
echo "$out"
