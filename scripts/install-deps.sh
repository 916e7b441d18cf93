#!/bin/sh
# Installs what airlock needs on Debian 12: the language runtimes
# sandboxes use (python3 with numpy, pandas, matplotlib and scikit-learn
# from Debian, since PyPI is not reachable; bash; nodejs), curl for the
# demo and the baseline the benchmark compares against (bubblewrap);
# debootstrap, with which `airlock template build` makes Debian roots (the
# code-interpreter template setup.sh builds, the tests' templates and the
# container image).
# With --tests, also what only the tests use: nginx and dnsmasq for the
# chart's router on loopback, and
# CPython's own test suite (libpython3.11-testsuite), a sample of which
# runs inside a sandbox; e2fsprogs for a read-only data_dir (ext4 on a
# loop device); pip and venv, with which the Python SDK's tests build
# its wheel and install it offline; postgresql, the server the shared
# store's tests start on loopback (their own data directory, as the
# postgres user; no cluster of the package's own is used); nbformat,
# which checks the notebooks sessions export; and chromium, the headless
# browser the web console's tests drive (Debian's build: no browser is
# downloaded).
set -eu
if [ "$(id -u)" != 0 ]; then
	echo "install-deps: run as root" >&2
	exit 1
fi
pkgs="python3 python3-numpy python3-pandas python3-matplotlib python3-sklearn
      bash coreutils nodejs ca-certificates fonts-dejavu-core bubblewrap curl
      debootstrap"
test_pkgs="nginx dnsmasq-base libpython3.11-testsuite e2fsprogs postgresql
           python3-pip python3-venv python3-nbformat chromium"
if [ "${1:-}" = --tests ]; then
	pkgs="$pkgs $test_pkgs"
fi
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "install-deps: installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	# No service starts (nginx's package would listen on port 80): the
	# tests run their own nginx and dnsmasq on loopback.
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 0755 /usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	apt-get update -q
	# shellcheck disable=SC2086
	apt-get install -y -q --no-install-recommends $missing
fi
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	echo "install-deps: note: add /usr/local/go/bin to PATH" >&2
fi
