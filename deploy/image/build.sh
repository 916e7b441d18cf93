#!/bin/sh
# Builds airlock's container image without a container engine, as root:
# the same image as deploy/image/Dockerfile, written as an OCI archive that
# `docker load`, `podman load`, `ctr images import` and `skopeo copy
# oci-archive:` take.
#
#   deploy/image/build.sh [-o IMAGE.tar] [-t NAME:TAG] [--fresh]
#
# Layer 1 is the Debian root of rootfs.sh (packages.txt); it is cached under
# $AIRLOCK_DEPLOY_CACHE (default ~/.cache/airlock-deploy) by a key made of
# rootfs.sh, internal/image/debian-root.sh, packages.txt and the mirror, so only the first
# build (or --fresh, which takes Debian's latest updates) runs debootstrap.
# Layer 2 is the static airlock binary, built from this tree. The image's
# entrypoint, arguments, ports and environment are read from the Dockerfile,
# so the two cannot drift apart. Prints the archive's path on the last line.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0
cache=${AIRLOCK_DEPLOY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airlock-deploy}
export AIRLOCK_DEPLOY_CACHE=$cache
version=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo dev)
out=$cache/image/airlock.tar
tag=airlock:$version
fresh=
while [ $# -gt 0 ]; do
	case $1 in
	-o) out=$2; shift 2 ;;
	-t) tag=$2; shift 2 ;;
	--fresh) fresh=1; shift ;;
	*) echo "usage: build.sh [-o IMAGE.tar] [-t NAME:TAG] [--fresh]" >&2; exit 64 ;;
	esac
done
if [ "$(id -u)" != 0 ]; then
	echo "build.sh: run as root (debootstrap, chroot, file owners in the layers)" >&2
	exit 1
fi
case $out in /*) ;; *) out=$(pwd)/$out ;; esac
mkdir -p "$cache/rootfs" "$cache/layers" "$(dirname "$out")"
bin=$("$repo/deploy/tools/install.sh") # prints only its directory

# Layer 1: the Debian root, built once per key.
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
key=$( (cat "$here/rootfs.sh" "$repo/internal/image/debian-root.sh" "$here/packages.txt"; echo "$mirror $security") | sha256sum | cut -c1-16)
root=$cache/rootfs/$key
layer1=$cache/layers/rootfs-$key.tar.gz
exec 9>"$cache/rootfs.lock"
flock 9
if [ -n "$fresh" ]; then
	rm -rf "$root" "$layer1"
fi
if [ ! -e "$root.epoch" ]; then
	rm -rf "$root" "$layer1"
	start=$(date +%s)
	echo "build.sh: building the Debian root $key (debootstrap and apt: minutes, once)" >&2
	"$here/rootfs.sh" "$root" >&2
	date +%s >"$root.epoch"
	echo "build.sh: Debian root built in $(($(date +%s) - start)) s" >&2
fi
if [ ! -e "$layer1" ]; then
	"$bin/ociimage" layer -dir "$root" -out "$layer1" -epoch "$(cat "$root.epoch")" >&2
fi
# Old keys go.
for d in "$cache/rootfs/"*; do
	k=${d##*/}; k=${k%.epoch}
	[ "$k" = "$key" ] || rm -rf "$d"
done
for f in "$cache/layers/rootfs-"*.tar.gz; do
	[ "$f" = "$layer1" ] || rm -f "$f"
done
flock -u 9

# Layer 2: airlock, built by scripts/build.sh (the small init embedded).
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}
mkdir -p "$work/layer2/usr/local/bin"
VERSION=$version "$repo/scripts/build.sh" "$work/layer2/usr/local/bin/airlock" >&2
"$bin/ociimage" layer -dir "$work/layer2" -out "$work/airlock.tar.gz" -epoch "$epoch" >&2

# The image's settings, from the Dockerfile.
df=$here/Dockerfile
instr() { sed -n "s/^$1 //p" "$df" | tail -1; }
set -- -out "$out" -tag "$tag" -epoch "$epoch" \
	-entrypoint "$(instr ENTRYPOINT)" -cmd "$(instr CMD)" -workdir "$(instr WORKDIR)" \
	-label "org.opencontainers.image.title=airlock" -label "org.opencontainers.image.version=$version"
for p in $(sed -n 's/^EXPOSE //p' "$df"); do set -- "$@" -port "$p"; done
for e in $(sed -n 's/^ENV //p' "$df"); do set -- "$@" -env "$e"; done
"$bin/ociimage" image "$@" \
	-history "debootstrap bookworm (minbase, slim) + apt-get install $(grep -v '^#' "$here/packages.txt" | xargs)" \
	-history "COPY airlock /usr/local/bin/airlock" \
	"$layer1" "$work/airlock.tar.gz" >&2
echo "$out"
