#!/bin/sh
# Builds a Debian 12 root file system into DIR, as root: debootstrap
# --variant=minbase, made slim like debian:12-slim (no documentation,
# manual pages or translations; copyright files stay), then PKG...
# installed with apt-get (no recommended packages), Debian's updates
# applied. Nothing of the host is left in it (resolv.conf, hostname, apt
# lists and caches, logs are removed). Lines starting "stage:" say where
# it is, for a progress display.
#
#   debian-root.sh DIR [PKG...]
#
# Used by `airlock template build` (embedded in the binary; cached by a key
# made of this script, the packages and the mirrors) and by
# deploy/image/rootfs.sh, for airlock's own container image.
set -eu
# Everything runs in a mount namespace of its own (debootstrap mounts /proc
# and /sys in the target: a build killed half-way leaves no mount), with
# an environment of its own (nothing of the caller's reaches the chroot).
if [ "${DEBIAN_ROOT_NS:-}" != 1 ]; then
	exec env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C \
		DEBIAN_MIRROR="${DEBIAN_MIRROR:-}" DEBIAN_SECURITY_MIRROR="${DEBIAN_SECURITY_MIRROR:-}" DEBIAN_ROOT_NS=1 \
		unshare --mount --propagation private /bin/sh "$0" "$@"
fi
dir=${1:?usage: debian-root.sh DIR [PKG...]}
shift
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
suite=bookworm
if [ "$(id -u)" != 0 ]; then
	echo "debian-root.sh: run as root (debootstrap, chroot)" >&2
	exit 1
fi
if [ -e "$dir" ]; then
	echo "debian-root.sh: $dir exists" >&2
	exit 1
fi
for tool in debootstrap unshare chroot; do
	command -v "$tool" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin"
	command -v "$tool" >/dev/null 2>&1 || {
		echo "debian-root.sh: $tool is not installed (apt-get install debootstrap)" >&2
		exit 1
	}
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT

echo "stage: debootstrap $suite"
debootstrap --variant=minbase --arch=amd64 "$suite" "$dir" "$mirror" >"$log" 2>&1 || {
	tail -30 "$log" >&2
	exit 1
}

cat >"$dir/etc/dpkg/dpkg.cfg.d/docker" <<'CFG'
# As in Debian's slim images (debian:12-slim): no documentation, manual
# pages or translations; copyright files stay.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
CFG
# What debootstrap already installed goes the same way.
find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$dir/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$dir/usr/share/man/"* "$dir/usr/share/info/"* "$dir/usr/share/locale/"* \
	"$dir/usr/share/groff/"* "$dir/usr/share/lintian/"*

rm -f "$dir/etc/apt/sources.list"
cat >"$dir/etc/apt/sources.list.d/debian.sources" <<SRC
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
SRC
# No service starts while packages install.
printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
chmod 0755 "$dir/usr/sbin/policy-rc.d"

echo "stage: apt-get install $*"
# /proc and /dev only for the install (the namespace's, gone with it).
# The host's resolver is copied in for apt and removed afterwards.
cp /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
{
	mountpoint -q "$dir/proc" || mount -t proc proc "$dir/proc"
	mount --rbind /dev "$dir/dev"
	export DEBIAN_FRONTEND=noninteractive
	chroot "$dir" apt-get update -q
	chroot "$dir" apt-get upgrade -y -q
	if [ $# -gt 0 ]; then
		chroot "$dir" apt-get install -y -q --no-install-recommends "$@"
	fi
	chroot "$dir" apt-get clean
	umount -R "$dir/dev" "$dir/proc"
	if mountpoint -q "$dir/sys"; then umount -R "$dir/sys"; fi
} >"$log" 2>&1 || {
	tail -30 "$log" >&2
	exit 1
}

echo "stage: clean"
rm -f "$dir/usr/sbin/policy-rc.d" "$dir/etc/resolv.conf" "$dir/etc/hostname"
rm -rf "$dir/var/lib/apt/lists/"* "$dir/var/cache/apt/"* "$dir/var/cache/debconf/"*-old \
	"$dir/var/log/"*.log "$dir/var/log/apt/"* "$dir/tmp/"* "$dir/dev/"*
echo "stage: done $(du -sh "$dir" | cut -f1)"
