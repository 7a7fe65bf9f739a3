#!/usr/bin/env bash
# Builds the release archives, as users install them:
#  - the kubectl plugin kubectl-create-transient_configmap: one .tar.gz per platform
#    with the binary and the LICENSE at its root, and a krew-style plugin manifest
#    for them;
#  - sweepd, for nodes that run it from systemd rather than from the image: one
#    .tar.gz per Linux platform with the binary, the LICENSE, and the systemd unit
#    and its environment file (systemd/sweepd.service, systemd/sweepd.env);
# and one sha256 checksums file for all of them.
#
# Usage: hack/release.sh   (the Makefile's `make release`)
# Environment:
#   VERSION           the version stamped into the binaries and the manifest (default: git describe)
#   REVISION          the commit stamped into the binaries (default: git rev-parse HEAD)
#   DIST              output directory (default: dist)
#   PLATFORMS         space-separated GOOS/GOARCH pairs of the plugin
#                     (default: linux, darwin, windows × amd64, arm64)
#   SWEEPD_PLATFORMS  space-separated GOOS/GOARCH pairs of sweepd (default: linux/amd64 linux/arm64)
#   BASE_URL          where the archives will be downloaded from, for the manifest's uris
#                     (default: the GitHub release of VERSION)
#
# The archives are reproducible: fixed file order, modes, owner and modification
# time, no build paths (-trimpath), so the checksums of a version do not depend on
# who built it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
name=kubectl-create-transient_configmap
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
revision=${REVISION:-$(git rev-parse HEAD 2>/dev/null || true)}
dist=${DIST:-dist}
platforms=${PLATFORMS:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"}
sweepd_platforms=${SWEEPD_PLATFORMS:-"linux/amd64 linux/arm64"}
base_url=${BASE_URL:-https://github.com/sweep-k8s/sweep/releases/download/$version}
ldflags="-s -w -X github.com/sweep-k8s/sweep/internal/version.version=$version -X github.com/sweep-k8s/sweep/internal/version.revision=$revision"

mkdir -p "$dist"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

: >"$dist/checksums.txt"

# build CMD OS ARCH OUT: a static, trimmed binary with the version stamped in.
build() {
	echo "release: building $1 for $2/$3" >&2
	CGO_ENABLED=0 GOOS=$2 GOARCH=$3 go build -trimpath -ldflags "$ldflags" -o "$4" "./cmd/$1"
}

# archive DIR NAME FILE...: DIST/NAME from the FILEs of DIR, its checksum
# appended to checksums.txt; prints the checksum. The modes are normalized
# too: 0755 for the binaries, 0644 for the rest, whatever the umask of the
# checkout.
archive() {
	local dir=$1 archive=$2
	shift 2
	tar -C "$dir" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=a+rX,u+w,go-w \
		-cf - "$@" | gzip -n >"$dist/$archive"
	local sum
	sum=$(sha256sum "$dist/$archive" | cut -d' ' -f1)
	echo "$sum  $archive" >>"$dist/checksums.txt"
	echo "$sum"
}

platforms_yaml=""
for p in $platforms; do
	os=${p%/*} arch=${p#*/}
	bin=$name
	[ "$os" = windows ] && bin=$name.exe
	mkdir -p "$stage/$os-$arch"
	build "$name" "$os" "$arch" "$stage/$os-$arch/$bin"
	cp LICENSE "$stage/$os-$arch/LICENSE"
	archive=$name-$version-$os-$arch.tar.gz
	sum=$(archive "$stage/$os-$arch" "$archive" LICENSE "$bin")
	platforms_yaml+="  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $base_url/$archive
    sha256: $sum
    bin: $bin
    files:
    - from: $bin
      to: .
    - from: LICENSE
      to: .
"
done

# krew installs a plugin named create-transient_configmap as
# kubectl-create_transient_configmap, which kubectl runs as
# `kubectl create_transient_configmap`, not `kubectl create transient_configmap`
# (kubernetes-sigs/krew#865); the manifest says so to the user.
cat >"$dist/create-transient_configmap.yaml" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: create-transient_configmap
spec:
  version: $version
  homepage: https://github.com/sweep-k8s/sweep/blob/main/docs/kubectl-plugin.md
  shortDescription: Run a Job with a ConfigMap that is deleted with the Job
  description: |
    Runs a Job (from a CronJob or an image) with a ConfigMap made for that run
    alone. The ConfigMap is owned by the Job, so the garbage collector deletes
    it with the Job, even if the plugin is killed.
  caveats: |
    krew installs this plugin as kubectl-create_transient_configmap, which
    kubectl runs as \`kubectl create_transient_configmap\`. To run it as
    \`kubectl create transient_configmap\` (kubectl 1.31 or newer), link it
    under its real name somewhere on your PATH:
      ln -s ~/.krew/bin/kubectl-create_transient_configmap ~/.krew/bin/kubectl-create-transient_configmap
  platforms:
$platforms_yaml
YAML
# sweepd with what the systemd route needs besides it, so that it needs neither
# Go nor a clone: install the binary, the unit and its environment file as
# "With systemd" in docs/install.md says.
for p in $sweepd_platforms; do
	os=${p%/*} arch=${p#*/}
	dir=$stage/sweepd-$os-$arch
	mkdir -p "$dir"
	build sweepd "$os" "$arch" "$dir/sweepd"
	cp LICENSE systemd/sweepd.service systemd/sweepd.env "$dir/"
	archive "$dir" "sweepd-$version-$os-$arch.tar.gz" LICENSE sweepd sweepd.env sweepd.service >/dev/null
done

echo "release: $(wc -l <"$dist/checksums.txt") archives, checksums and krew manifest in $dist" >&2
