#!/usr/bin/env bash
# Installs the Debian packages that `make test` needs and a fresh Debian
# machine lacks (the real node of test/node: containerd, runc, iptables,
# iproute2, util-linux; for its CRI-O conmon, and libseccomp-dev and
# pkg-config to build it; promtool and prometheus; systemd-analyze; make and
# gcc for the race detector). As root it installs what is missing with
# apt-get; otherwise it fails at once with the one command to run.
set -euo pipefail

need=()
command -v make >/dev/null || need+=(make)
command -v gcc >/dev/null || need+=(gcc) # the race detector needs cgo
# promtool checks the alerts; the server runs the dashboard's queries.
{ command -v promtool && command -v prometheus; } >/dev/null || need+=(prometheus)
command -v systemd-analyze >/dev/null || need+=(systemd) # checks of systemd/sweepd.service
# The real node of test/node: Debian's runtime, iptables for its Service
# DNAT, unshare and ip for its network namespace.
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
command -v conmon >/dev/null || need+=(conmon) # CRI-O's container monitor
# CRI-O is built with seccomp (hack/build-tools.sh crio): cgo, libseccomp.
[ -e /usr/include/seccomp.h ] || need+=(libseccomp-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v iptables >/dev/null || need+=(iptables)
command -v ip >/dev/null || need+=(iproute2)
command -v unshare >/dev/null || need+=(util-linux)
# GNU time measures sweepd's peak RSS in the prune benchmark.
[ -x /usr/bin/time ] || need+=(time)

[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "install-deps: missing Debian packages; run as root:" >&2
	echo "  apt-get update && apt-get install -y --no-install-recommends ${need[*]}" >&2
	exit 1
fi
echo "install-deps: installing ${need[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
