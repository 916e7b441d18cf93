#!/bin/sh
# Runs a command in an unpacked image root the way the chart's privileged
# pod runs airlock, with no container engine: new mount, pid, uts and ipc
# namespaces (the command is PID 1), pivot_root into ROOT, the root file
# system read-only, tmpfs where the chart mounts emptyDirs (/run/airlock,
# /var/cache/airlock, /var/lib/airlock: mode 0777, as kubelet makes an
# emptyDir; /tmp 1777), the host's /dev and /sys (cgroups writable, as
# `privileged: true` gives them), a fresh /proc, and the host's network (so
# that a test reaches the server on loopback). The image test uses it; it
# is also a quick way to try an image on a host:
#
#   deploy/tools/install.sh  # ociimage
#   ociimage unpack -image airlock.tar -dir /tmp/airlock-root
#   deploy/image/run-rootfs.sh [-v HOSTDIR:DIR]... /tmp/airlock-root airlock doctor
#
# -v binds a host directory read-only (as the chart mounts its ConfigMap,
# Secret and downward API files); -i runs a command first (words split on
# spaces: the chart's init container's). Nothing stays mounted afterwards: every
# mount lives in the namespace, which ends with the command.
set -eu
binds="" init=""
while [ $# -gt 0 ]; do
	case $1 in
	-v) binds="$binds $2"; shift 2 ;;
	-i) init=$2; shift 2 ;;
	*) break ;;
	esac
done
if [ $# -lt 2 ]; then
	echo "usage: run-rootfs.sh [-v HOSTDIR:DIR]... [-i INITCMD] ROOT CMD [ARGS...]" >&2
	exit 64
fi
root=$(cd "$1" && pwd)
shift
exec unshare --mount --pid --uts --ipc --fork --kill-child --propagation private \
	sh -eu -c '
	root=$1 binds=$2 init=$3; shift 3
	mount --bind "$root" "$root"
	mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
	mount --rbind /dev "$root/dev"
	mount --rbind /sys "$root/sys"
	for d in run/airlock var/cache/airlock var/lib/airlock tmp; do
		mkdir -p "$root/$d"
		mount -t tmpfs -o nosuid,nodev,mode=0777 tmpfs "$root/$d"
	done
	chmod 1777 "$root/tmp"
	for b in $binds; do
		src=${b%%:*} dst=${b#*:}
		mkdir -p "$root/$dst"
		mount --bind "$src" "$root/$dst"
		mount -o remount,bind,ro "$root/$dst"
	done
	mount -o remount,bind,ro "$root"
	hostname airlock-0
	cd "$root"
	pivot_root . .
	umount -l .
	cd /
	if [ -n "$init" ]; then $init; fi
	exec "$@"
	' run-rootfs "$root" "$binds" "$init" "$@"
