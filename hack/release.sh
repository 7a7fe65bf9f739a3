#!/usr/bin/env bash
# The release, in three modes (the Makefile's targets):
#
# hack/release.sh [archives]   (make release) builds the release archives, as
# users install them without the image:
#  - the kubectl plugin kubectl-create-transient_configmap: one .tar.gz per platform
#    with the binary and the LICENSE at its root, and a krew-style plugin manifest
#    for them;
#  - sweepd, for nodes that run it from systemd rather than from the image: one
#    .tar.gz per Linux platform with the binary, the LICENSE, and the systemd unit
#    and its environment file (systemd/sweepd.service, systemd/sweepd.env);
#  - the CycloneDX SBOM of each archive's binary, ARCHIVE.cdx.json (cyclonedx-gomod,
#    from the Go build information of the binary itself);
# and one sha256 checksums file for all of them.
#
# hack/release.sh publish   (make release-publish) publishes VERSION to the OCI
# registry REGISTRY:
#  - the image REGISTRY/sweep-k8s/sweep, tagged with the chart's appVersion
#    (the version without its v, what the chart installs) and with VERSION: an
#    image index for linux/amd64 and linux/arm64, each the Dockerfile's final
#    stage (hack/image builds it without a Docker engine);
#  - the chart as the OCI artifact REGISTRY/sweep-k8s/charts/sweep, version the
#    chart's (helm install oci://REGISTRY/sweep-k8s/charts/sweep --version X);
#  - cosign's signatures of the image index, of each platform's image and of
#    the chart, and the SBOM of each platform's sweepd as a signed CycloneDX
#    attestation of the image index;
# and lists what it pushed, by digest, in DIST/oci-artifacts.txt.
#
# hack/release.sh verify   (make release-verify) checks what publish pushed:
# the signatures of the image (both tags) and the chart, and the SBOM
# attestations, with cosign.
#
# Usage: hack/release.sh [archives|publish|verify]
# Environment:
#   VERSION           the version stamped into the binaries and the manifest (default: git describe);
#                     publish and verify want v<the chart's version>, which must equal its appVersion
#   REVISION          the commit stamped into the binaries (default: git rev-parse HEAD)
#   DIST              output directory (default: dist)
#   PLATFORMS         space-separated GOOS/GOARCH pairs of the plugin
#                     (default: linux, darwin, windows × amd64, arm64)
#   SWEEPD_PLATFORMS  space-separated GOOS/GOARCH pairs of sweepd, in the archives and the
#                     image (default: linux/amd64 linux/arm64)
#   BASE_URL          where the archives will be downloaded from, for the manifest's uris
#                     (default: the GitHub release of VERSION)
# publish and verify:
#   REGISTRY          the registry's host[:port] (default: ghcr.io)
#   PLAIN_HTTP        1: the registry speaks plain HTTP (the tests' own)
#   REGISTRY_USERNAME, REGISTRY_PASSWORD
#                     credentials for REGISTRY (publish; default: none, or a login done before)
#   BASE_IMAGE        the image's base index (default: the Dockerfile's final FROM)
#   COSIGN_KEY        publish: cosign's private key (a file, or env://VAR), with
#                     COSIGN_PASSWORD; the signatures go to no transparency log.
#                     Unset: keyless, with the CI's OIDC identity (GitHub Actions'
#                     id-token), a Fulcio certificate and Rekor's log.
#   COSIGN_PUB        verify: the public key of COSIGN_KEY. Unset: the keyless identity of
#                     .github/workflows/release.yaml on a tag of github.com/sweep-k8s/sweep.
#
# The tools (helm, cosign, cyclonedx-gomod) are built from the module proxy by
# hack/build-tools.sh (make does that first). The archives, the SBOMs and the
# images' layers are reproducible: fixed file order, modes, owner and
# modification time, no build paths (-trimpath), so the checksums and digests of
# a version do not depend on who built it.
set -euo pipefail

mode=${1:-archives}
case $mode in
archives | publish | verify) ;;
*)
	echo "usage: $0 [archives|publish|verify]" >&2
	exit 2
	;;
esac

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

# tool NAME prints the path of a tool that hack/build-tools.sh built.
tool() {
	local path
	path=$("$root/hack/build-tools.sh" path "$1")
	if [ ! -x "$path" ]; then
		echo "release: $1 is not built: run hack/build-tools.sh $1 (the make targets do)" >&2
		exit 1
	fi
	echo "$path"
}

mkdir -p "$dist"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# build CMD OS ARCH OUT: a static, trimmed binary with the version stamped in.
build() {
	echo "release: building $1 for $2/$3" >&2
	CGO_ENABLED=0 GOOS=$2 GOARCH=$3 go build -trimpath -ldflags "$ldflags" -o "$4" "./cmd/$1"
}

# sbom OS ARCH BINARY OUT: the CycloneDX SBOM of a Go binary for OS/ARCH,
# from its build information: the main module at VERSION and every module
# linked in, with their checksums. No serial number and no timestamp, so that
# it is reproducible. cyclonedx-gomod (v1.10.0) takes the package URLs'
# goos and goarch from its environment, not from the binary: they are set.
sbom() {
	local cyclonedx
	cyclonedx=$(tool cyclonedx-gomod)
	GOOS=$1 GOARCH=$2 "$cyclonedx" bin -json -noserial -notimestamp -version "$version" -output "$4" "$3"
}

# chart_version prints a field of charts/sweep/Chart.yaml (version, appVersion).
chart_field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\} *\$/\1/p" charts/sweep/Chart.yaml; }

# The names that the README, the chart and docs/release.md give: the image
# REGISTRY/sweep-k8s/sweep, the chart oci://REGISTRY/sweep-k8s/charts/sweep.
registry=${REGISTRY:-ghcr.io}
image=$registry/sweep-k8s/sweep
charts=$registry/sweep-k8s/charts
cosign_http=()
helm_http=()
if [ "${PLAIN_HTTP:-}" = 1 ]; then
	cosign_http=(--allow-http-registry)
	helm_http=(--plain-http)
fi

# release_version checks that VERSION is the chart's: v<version>, with an
# appVersion equal to it, which is the image tag that the chart installs.
release_version() {
	local cv av
	cv=$(chart_field version) av=$(chart_field appVersion)
	if [ "$version" != "v$cv" ] || [ "$av" != "$cv" ]; then
		echo "release: VERSION $version: a release is v<charts/sweep/Chart.yaml's version>," \
			"and its appVersion the same (Chart.yaml: version $cv, appVersion $av); see docs/release.md" >&2
		exit 1
	fi
	echo "$cv"
}

publish() {
	local tag
	tag=$(release_version)
	local helm cosign
	helm=$(tool helm)
	cosign=$(tool cosign)
	if [ -n "${REGISTRY_USERNAME:-}" ]; then
		printf '%s' "${REGISTRY_PASSWORD:-}" | "$helm" registry login "$registry" -u "$REGISTRY_USERNAME" --password-stdin
		printf '%s' "${REGISTRY_PASSWORD:-}" | "$cosign" login "$registry" -u "$REGISTRY_USERNAME" --password-stdin
	fi
	local sign=(--yes "${cosign_http[@]}")
	if [ -n "${COSIGN_KEY:-}" ]; then
		sign+=(--key "$COSIGN_KEY" --tlog-upload=false)
	fi

	# The image: the binaries that the archives hold (the same build,
	# reproducible), on the Dockerfile's base.
	local platforms=() sboms=()
	for p in $sweepd_platforms; do
		os=${p%/*} arch=${p#*/}
		build sweepd "$os" "$arch" "$stage/$os-$arch/sweepd"
		sbom "$os" "$arch" "$stage/$os-$arch/sweepd" "$stage/sweepd-$os-$arch.cdx.json"
		platforms+=(-platform "$p=$stage/$os-$arch/sweepd")
		sboms+=("$stage/sweepd-$os-$arch.cdx.json")
	done
	local insecure=()
	[ "${PLAIN_HTTP:-}" = 1 ] && insecure=(-insecure)
	echo "release: pushing the image $image:$tag and :$version" >&2
	go run ./hack/image "${platforms[@]}" "${insecure[@]}" ${BASE_IMAGE:+-base "$BASE_IMAGE"} \
		-version "$version" -revision "$revision" -created "$(git log -1 --format=%cI 2>/dev/null || echo 1970-01-01T00:00:00Z)" \
		-tag "$image:$tag" -tag "$image:$version" -digest-file "$stage/image.digest" >/dev/null
	local digest
	digest=$(cat "$stage/image.digest")

	# The chart, as an OCI artifact.
	"$helm" package charts/sweep --destination "$stage" >/dev/null
	local out chart_digest
	out=$("$helm" push "$stage/sweep-$tag.tgz" "oci://$charts" "${helm_http[@]}" 2>&1)
	echo "$out" >&2
	chart_digest=$(sed -n 's/^Digest: *\(sha256:[0-9a-f]*\).*/\1/p' <<<"$out")
	: "${chart_digest:?helm push printed no digest}"

	# Signatures: the index and each platform's image (--recursive), the
	# chart; the SBOMs as attestations of the index.
	echo "release: signing $image@$digest and $charts/sweep@$chart_digest" >&2
	"$cosign" sign "${sign[@]}" --recursive "$image@$digest"
	"$cosign" sign "${sign[@]}" "$charts/sweep@$chart_digest"
	for f in "${sboms[@]}"; do
		"$cosign" attest "${sign[@]}" --type cyclonedx --predicate "$f" "$image@$digest"
	done
	printf '%s\n' "$image:$tag@$digest" "$image:$version@$digest" "$charts/sweep:$tag@$chart_digest" >"$dist/oci-artifacts.txt"
	echo "release: published $image:$tag@$digest and oci://$charts/sweep --version $tag; listed in $dist/oci-artifacts.txt" >&2
}

verify() {
	local tag
	tag=$(release_version)
	local cosign
	cosign=$(tool cosign)
	local args=("${cosign_http[@]}")
	if [ -n "${COSIGN_PUB:-}" ]; then
		# The key alone is trusted: a trusted root of no Sigstore
		# authority, so that cosign does not fetch the public instance's
		# (TUF) for signatures that are in no log.
		echo '{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}' >"$stage/trusted-root.json"
		args+=(--key "$COSIGN_PUB" --insecure-ignore-tlog --trusted-root "$stage/trusted-root.json")
	else
		args+=(--certificate-oidc-issuer https://token.actions.githubusercontent.com
			--certificate-identity-regexp '^https://github\.com/sweep-k8s/sweep/\.github/workflows/release\.yaml@refs/tags/v')
	fi
	for ref in "$image:$tag" "$image:$version" "$charts/sweep:$tag"; do
		echo "release: verifying the signature of $ref" >&2
		"$cosign" verify "${args[@]}" "$ref" >/dev/null
	done
	echo "release: verifying the SBOM attestations of $image:$tag" >&2
	"$cosign" verify-attestation "${args[@]}" --type cyclonedx "$image:$tag" >/dev/null
	echo "release: $image:$tag, its SBOMs and oci://$charts/sweep $tag verified" >&2
}

case $mode in
publish)
	publish
	exit 0
	;;
verify)
	verify
	exit 0
	;;
esac

: >"$dist/checksums.txt"

# archive DIR NAME FILE...: DIST/NAME from the FILEs of DIR, its checksum
# appended to checksums.txt; prints the checksum. The modes are normalized
# too: 0755 for the binaries, 0644 for the rest, whatever the umask of the
# checkout.
archive() {
	local dir=$1 archive=$2
	shift 2
	tar -C "$dir" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=a+rX,u+w,go-w \
		-cf - "$@" | gzip -n >"$dist/$archive"
	checksum "$archive"
}

# checksum NAME appends the sha256 of DIST/NAME to checksums.txt and prints it.
checksum() {
	local sum
	sum=$(sha256sum "$dist/$1" | cut -d' ' -f1)
	echo "$sum  $1" >>"$dist/checksums.txt"
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
	# kubectl's completion executable for the plugin, a POSIX shell script:
	# not on Windows.
	shim=kubectl_complete-create-transient_configmap
	shim_yaml=""
	if [ "$os" = windows ]; then
		sum=$(archive "$stage/$os-$arch" "$archive" LICENSE "$bin")
	else
		cp "cmd/$name/$shim" "$stage/$os-$arch/$shim"
		sum=$(archive "$stage/$os-$arch" "$archive" LICENSE "$bin" "$shim")
		shim_yaml="    - from: $shim
      to: .
"
	fi
	sbom "$os" "$arch" "$stage/$os-$arch/$bin" "$dist/${archive%.tar.gz}.cdx.json"
	checksum "${archive%.tar.gz}.cdx.json" >/dev/null
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
$shim_yaml"
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
	sbom "$os" "$arch" "$dir/sweepd" "$dist/sweepd-$version-$os-$arch.cdx.json"
	checksum "sweepd-$version-$os-$arch.cdx.json" >/dev/null
done

echo "release: $(grep -c '\.tar\.gz$' "$dist/checksums.txt") archives, their SBOMs, checksums and krew manifest in $dist" >&2
