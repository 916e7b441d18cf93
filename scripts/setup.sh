#!/bin/sh
# The first of the README's two commands: installs everything airlock needs
# on a fresh Debian 12 machine with Go, builds it, builds the
# code-interpreter template, checks the host with `airlock doctor` and runs
# the demo.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
./scripts/build.sh
# Optional second kernel (docs/guides/gvisor.md): WITH_GVISOR=1 builds the
# pinned runsc into /usr/local/bin (about 3 minutes the first time) and
# runs the demo on gVisor. (Not an AIRLOCK_ variable: those are airlock's
# configuration.)
if [ "${WITH_GVISOR:-0}" = 1 ]; then
	CGO_ENABLED=0 GOBIN=/usr/local/bin PATH="$PATH:/usr/local/go/bin" go install \
		"gvisor.dev/gvisor/runsc@$(sed -n 's/^const PinnedVersion = "\(.*\)"$/\1/p' internal/gvisor/gvisor.go)"
fi
install -m 0755 bin/airlock /usr/local/bin/airlock
echo "installed /usr/local/bin/airlock"
# The code-interpreter template (README, "Templates"): the packages agent
# code expects, from Debian with debootstrap. About 12 minutes and 1.7 GB
# the first time; cached in /var/cache/airlock/templates by package list,
# so a second setup only re-imports it when the list changed.
if bin/airlock template list --json | grep -q '"name":"code-interpreter"'; then
	echo "template code-interpreter: registered (airlock template build code-interpreter --recipe code-interpreter rebuilds it)"
else
	bin/airlock template build code-interpreter --recipe code-interpreter
fi
if [ "${WITH_GVISOR:-0}" = 1 ]; then
	export AIRLOCK_ISOLATION=gvisor
fi
bin/airlock doctor
./scripts/demo.sh
