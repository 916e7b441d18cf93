#!/bin/sh
# Builds the root file system of airlock's image into DIR, as root: the
# Debian 12 root of internal/image/debian-root.sh (the script `airlock
# template build` runs too: debootstrap minbase, slim like debian:12-slim)
# with the packages of packages.txt, the same apt-get command the
# Dockerfile runs, then what only the image needs.
#
#   deploy/image/rootfs.sh DIR
#
# build.sh calls it and caches DIR under a key made of this script, the
# shared script, the package list and the mirror, so it runs again only
# when one of them changes (or with build.sh --fresh, to take Debian's
# updates).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: rootfs.sh DIR}
# shellcheck disable=SC2046
"$here/../../internal/image/debian-root.sh" "$dir" $(grep -v '^#' "$here/packages.txt" | xargs) >/dev/null
# nginx's packaged site listens on port 80 as root; the chart's router
# brings its own configuration.
rm -f "$dir/etc/nginx/sites-enabled/default"
echo "rootfs.sh: $dir: $(du -sh "$dir" | cut -f1)"
