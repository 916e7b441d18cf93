#!/bin/sh
# Builds the root file system of airlock's image into DIR, as root:
# Debian 12 (debootstrap --variant=minbase), made slim like debian:12-slim
# (dpkg-slim.cfg), then the packages of packages.txt installed with the
# same apt-get command the Dockerfile runs. Nothing of the host is left in
# it (resolv.conf, hostname, apt lists and caches are removed).
#
#   deploy/image/rootfs.sh DIR
#
# build.sh calls it and caches DIR under a key made of this script, the
# package list and the mirror, so it runs again only when one of them
# changes (or with build.sh --fresh, to take Debian's updates).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:?usage: rootfs.sh DIR}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
suite=bookworm
if [ "$(id -u)" != 0 ]; then
	echo "rootfs.sh: run as root (debootstrap, chroot)" >&2
	exit 1
fi
if [ -e "$dir" ]; then
	echo "rootfs.sh: $dir exists" >&2
	exit 1
fi
pkgs=$(grep -v '^#' "$here/packages.txt" | xargs)

debootstrap --variant=minbase --arch=amd64 "$suite" "$dir" "$mirror" >"$dir.debootstrap.log" 2>&1 || {
	tail -30 "$dir.debootstrap.log" >&2
	exit 1
}
rm -f "$dir.debootstrap.log"

install -m 0644 "$here/dpkg-slim.cfg" "$dir/etc/dpkg/dpkg.cfg.d/docker"
# What debootstrap already installed goes the same way.
find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$dir/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$dir/usr/share/man/"* "$dir/usr/share/info/"* "$dir/usr/share/locale/"* \
	"$dir/usr/share/groff/"* "$dir/usr/share/lintian/"*

rm -f "$dir/etc/apt/sources.list"
cat >"$dir/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
# No service starts while packages install (nginx would).
printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
chmod 0755 "$dir/usr/sbin/policy-rc.d"

# /proc and /dev only for the install, in a mount namespace of its own so
# that nothing stays mounted whatever happens.
unshare --mount --propagation private sh -eu -c '
	dir=$1; shift
	mount -t proc proc "$dir/proc"
	mount --rbind /dev "$dir/dev"
	export DEBIAN_FRONTEND=noninteractive LC_ALL=C
	chroot "$dir" apt-get update -q
	chroot "$dir" apt-get upgrade -y -q
	chroot "$dir" apt-get install -y -q --no-install-recommends "$@"
	chroot "$dir" apt-get clean
' rootfs "$dir" $pkgs >"$dir.apt.log" 2>&1 || {
	tail -30 "$dir.apt.log" >&2
	exit 1
}
rm -f "$dir.apt.log"

rm -f "$dir/usr/sbin/policy-rc.d" "$dir/etc/resolv.conf" "$dir/etc/hostname"
rm -rf "$dir/var/lib/apt/lists/"* "$dir/var/cache/apt/"* "$dir/var/cache/debconf/"*-old \
	"$dir/var/log/"*.log "$dir/var/log/apt/"* "$dir/tmp/"* "$dir/dev/"*
# nginx's packaged site listens on port 80 as root; the chart's router
# brings its own configuration.
rm -f "$dir/etc/nginx/sites-enabled/default"
echo "rootfs.sh: $dir: $(du -sh "$dir" | cut -f1)"
