#!/usr/bin/env bash
# Builds the binaries that the test harness runs (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubectl, atomicwriter, helm,
# helm-docs, CNI plugins, Whereabouts, multus, containerd v2, CRI-O) and the release
# pipeline runs (cosign, cyclonedx-gomod, and a registry for its tests) from the Go module proxy,
# once per version, into a cache outside the work tree. Each binary is built to a
# temporary name and renamed, so an interrupted build never leaves a half binary
# that later runs would trust.
#
# Usage: hack/build-tools.sh [kube|controlplane|etcd|helm|helm-docs|lint|cni|whereabouts|multus|openshift-api|containerd|crio|registry|cosign|cyclonedx-gomod|release|test-e2e|test-node|test-chart|test-release|all]   (default: all)
#        (test-PKG: what the tests of test/PKG run, for make test-PKG)
#        hack/build-tools.sh path TOOL   prints where TOOL's binary is (built or not)
# Cache: $SWEEP_TOOLS_DIR, default ${XDG_CACHE_HOME:-$HOME/.cache}/sweep/tools.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools=$root/hack/tools
cache=${SWEEP_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sweep/tools}

# version MODDIR MODULE prints the version of MODULE required by the go.mod in MODDIR.
version() { awk -v m="$2" '{sub(/^require[ \t]+/, "")} $1==m && $2 ~ /^v/ {print $2; exit}' "$1/go.mod"; }

# build MODDIR PKG OUTDIR [NAME [LDFLAGS [TAGS [CGO]]]] builds PKG (a tool of
# the module in MODDIR) into OUTDIR, as NAME (default: the package's last
# element), with LDFLAGS added to the link and build tags TAGS, without cgo
# unless CGO is 1. A stamp beside the
# binary records both, so a changed recipe rebuilds (only the link, when Go's
# build cache is warm).
build() {
	local moddir=$1 pkg=$2 out=$3 name=${4:-} ldflags=${5:-} tags=${6:-} cgo=${7:-0}
	[ -n "$name" ] || name=$(basename "$pkg")
	[ "$name" = v3 ] && name=etcd
	local stamp=$out/.$name.ldflags recipe=$ldflags
	[ -z "$tags" ] || recipe="$ldflags tags=$tags"
	[ "$cgo" = 0 ] || recipe="$recipe cgo=$cgo"
	if [ -x "$out/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$recipe" ]; then
		return 0
	fi
	mkdir -p "$out"
	echo "build-tools: building $name into $out" >&2
	local start=$SECONDS
	(cd "$moddir" && CGO_ENABLED=$cgo go build -trimpath -tags="$tags" -ldflags="-s -w $ldflags" -o "$out/.$name.tmp" "$pkg")
	printf '%s' "$recipe" >"$stamp"
	mv "$out/.$name.tmp" "$out/$name"
	echo "build-tools: $name built in $((SECONDS - start))s" >&2
}

# kube_cmds NAME... builds the Kubernetes commands NAME (kube-apiserver, ...)
# at the version of the tools module.
kube_cmds() {
	local v
	v=$(version "$tools/kube" k8s.io/kubernetes)
	: "${v:?cannot read the version from go.mod}"
	# The version a release build stamps: without it every component reports
	# v0.0.0, and the chart's kubeVersion constraint refuses `helm install`.
	local minor=${v#v1.}
	minor=${minor%%.*}
	local pkgv=k8s.io/component-base/version
	local ldflags="-X $pkgv.gitVersion=$v -X $pkgv.gitMajor=1 -X $pkgv.gitMinor=$minor -X $pkgv.gitTreeState=clean"
	for c in "$@"; do
		build "$tools/kube" "k8s.io/kubernetes/cmd/$c" "$cache/kube-$v" "$c" "$ldflags"
	done
}

kube() {
	# kubelet and kube-scheduler make the real node of test/node.
	kube_cmds kube-apiserver kube-controller-manager kubectl kube-scheduler kubelet
	atomicwriter
}

# The kubelet's AtomicWriter as a command, for tests of code that watches a
# mounted ConfigMap.
atomicwriter() {
	local v
	v=$(version "$tools/kube" k8s.io/kubernetes)
	build "$tools/kube" ./atomicwriter "$cache/kube-$v"
}

etcd() {
	local v
	v=$(version "$tools/etcd" go.etcd.io/etcd/server/v3)
	: "${v:?cannot read the version from go.mod}"
	build "$tools/etcd" go.etcd.io/etcd/server/v3 "$cache/etcd-$v"
}

helm() {
	[ -d "$tools/helm" ] || return 0
	local v
	v=$(version "$tools/helm" helm.sh/helm/v3)
	: "${v:?cannot read the version from go.mod}"
	build "$tools/helm" helm.sh/helm/v3/cmd/helm "$cache/helm-$v"
}

# helm-docs generates the chart's README from values.yaml (make docs); a test
# checks that the README is not stale.
helm_docs() {
	local v
	v=$(version "$tools/helm-docs" github.com/norwoodj/helm-docs)
	: "${v:?cannot read the version from go.mod}"
	build "$tools/helm-docs" github.com/norwoodj/helm-docs/cmd/helm-docs "$cache/helm-docs-$v"
}

lint() {
	local v
	v=$(version "$tools/golangci-lint" github.com/golangci/golangci-lint/v2)
	: "${v:?cannot read the version from go.mod}"
	build "$tools/golangci-lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$cache/golangci-lint-$v"
}

# The CNI plugins that the CNI DEL tests make real attachments with, all in one
# directory: the test passes it as --cni-bin-dir, as /opt/cni/bin on a node.
cni() {
	local v
	v=$(version "$tools/cni" github.com/containernetworking/plugins)
	: "${v:?cannot read the version from go.mod}"
	for p in main/bridge ipam/host-local main/loopback; do
		build "$tools/cni" "github.com/containernetworking/plugins/plugins/$p" "$cache/cni-plugins-$v"
	done
}

# Whereabouts, the IPAM most multus users run: its reservations live in the
# API server, and a CNI DEL test checks that sweep's DEL replay frees them.
whereabouts() {
	local v
	v=$(version "$tools/whereabouts" github.com/k8snetworkplumbingwg/whereabouts)
	: "${v:?cannot read the version from go.mod}"
	build "$tools/whereabouts" github.com/k8snetworkplumbingwg/whereabouts/cmd "$cache/whereabouts-$v" whereabouts
}

# multus: its thin plugin, whose own ADD and DEL a test runs to see what
# they leave behind for a conflist delegate (multus #1449), and its thick
# plugin, multus-daemon and multus-shim, which test/node runs on the node.
multus() {
	local v
	v=$(version "$tools/multus" gopkg.in/k8snetworkplumbingwg/multus-cni.v4)
	: "${v:?cannot read the version from go.mod}"
	for c in multus multus-daemon multus-shim; do
		build "$tools/multus" "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/$c" "$cache/multus-$v" "$c"
	done
}

# OpenShift's API module, for the SecurityContextConstraints CRD in its
# manifests: test/chart installs it to check the chart's SCC. Nothing is
# built; the module is only downloaded into Go's module cache.
openshift_api() {
	(cd "$tools/openshift-api" && go mod download github.com/openshift/api)
}

# containerd v2 (with its runc shim and ctr), the test node's second runtime
# beside Debian's containerd 1.6: most clusters run v2. No cgo: the
# snapshotters that need it are left out by their build tags.
containerd() {
	local v
	v=$(version "$tools/containerd" github.com/containerd/containerd/v2)
	: "${v:?cannot read the version from go.mod}"
	local ldflags="-X github.com/containerd/containerd/v2/version.Version=${v#v}"
	for c in containerd containerd-shim-runc-v2 ctr; do
		build "$tools/containerd" "github.com/containerd/containerd/v2/cmd/$c" "$cache/containerd-$v" "$c" "$ldflags" "no_btrfs no_devmapper no_zfs"
	done
}

# CRI-O, OpenShift's runtime, the test node's third: crio with seccomp (cgo and
# Debian's libseccomp: without it CRI-O runs a RuntimeDefault pod unconfined,
# which no OpenShift node does), without gpgme, btrfs or devicemapper (the
# build tags leave out what this machine lacks and the tests do not use), and
# its small C helper pinns, built with gcc from the same module's source;
# conmon is Debian's.
crio() {
	local v
	v=$(version "$tools/crio" github.com/cri-o/cri-o)
	: "${v:?cannot read the version from go.mod}"
	build "$tools/crio" github.com/cri-o/cri-o/cmd/crio "$cache/crio-$v" crio "" \
		"seccomp containers_image_ostree_stub containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper" 1
	local out=$cache/crio-$v
	[ -x "$out/pinns" ] && return 0
	local src
	src=$(cd "$tools/crio" && go mod download -json github.com/cri-o/cri-o | awk -F'"' '$2 == "Dir" {print $4}')
	: "${src:?cannot find the source of github.com/cri-o/cri-o}"
	echo "build-tools: building pinns into $out" >&2
	gcc -std=c99 -Os -Wall -Wextra -static -o "$out/.pinns.tmp" "$src"/pinns/src/*.c
	mv "$out/.pinns.tmp" "$out/pinns"
}

# distribution's registry: the release tests push the image, the chart, the
# SBOM and the signatures into one of their own, and the test node pulls
# from it.
registry() {
	local v
	v=$(version "$tools/registry" github.com/distribution/distribution/v3)
	: "${v:?cannot read the version from go.mod}"
	build "$tools/registry" github.com/distribution/distribution/v3/cmd/registry "$cache/registry-$v" registry \
		"-X github.com/distribution/distribution/v3/version.version=$v"
}

# cosign signs the released image and chart and attests the image's SBOM
# (make release-publish); make release-verify and the tests verify them.
cosign() {
	local v
	v=$(version "$tools/cosign" github.com/sigstore/cosign/v2)
	: "${v:?cannot read the version from go.mod}"
	build "$tools/cosign" github.com/sigstore/cosign/v2/cmd/cosign "$cache/cosign-$v" cosign \
		"-X sigs.k8s.io/release-utils/version.gitVersion=$v"
}

# cyclonedx-gomod writes the SBOM of each released binary (make release).
cyclonedx_gomod() {
	local v
	v=$(version "$tools/cyclonedx-gomod" github.com/CycloneDX/cyclonedx-gomod)
	: "${v:?cannot read the version from go.mod}"
	build "$tools/cyclonedx-gomod" github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod "$cache/cyclonedx-gomod-$v"
}

# path TOOL prints where TOOL's binary is, for the Makefile and the release
# scripts: the tools that the release pipeline runs.
path() {
	local v
	case $1 in
	golangci-lint) v=$(version "$tools/golangci-lint" github.com/golangci/golangci-lint/v2) ;;
	helm) v=$(version "$tools/helm" helm.sh/helm/v3) ;;
	registry) v=$(version "$tools/registry" github.com/distribution/distribution/v3) ;;
	cosign) v=$(version "$tools/cosign" github.com/sigstore/cosign/v2) ;;
	cyclonedx-gomod) v=$(version "$tools/cyclonedx-gomod" github.com/CycloneDX/cyclonedx-gomod) ;;
	*) echo "build-tools: path: unknown tool ${1:-}" >&2; exit 2 ;;
	esac
	: "${v:?cannot read the version from go.mod}"
	echo "$cache/$1-$v/$1"
}

case ${1:-all} in
kube) kube ;;
controlplane) etcd; kube_cmds kube-apiserver ;; # what make demo runs
etcd) etcd ;;
helm) helm ;;
helm-docs) helm_docs ;;
lint) lint ;;
cni) cni ;;
whereabouts) whereabouts ;;
multus) multus ;;
openshift-api) openshift_api ;;
containerd) containerd ;;
crio) crio ;;
registry) registry ;;
cosign) cosign ;;
cyclonedx-gomod) cyclonedx_gomod ;;
release) helm; cosign; cyclonedx_gomod ;; # what make release and release-publish run
# What each test package runs (make test-PKG); test/docs runs none.
# test/e2e and the harness's own tests: the control plane with its
# controllers, kubectl, the kubelet's AtomicWriter, helm (to render the chart's
# DaemonSet), the CNI plugins, Whereabouts and multus.
test-e2e) etcd; kube_cmds kube-apiserver kube-controller-manager kubectl; atomicwriter; helm; cni; whereabouts; multus ;;
# test/chart: the control plane with its controllers, kubectl, helm and
# helm-docs, and OpenShift's SCC CRD; no release tool.
test-chart) etcd; kube_cmds kube-apiserver kube-controller-manager kubectl; helm; helm_docs; openshift_api ;;
# test/release: make release and release-publish's tools, and the registry
# they publish into.
test-release) helm; cosign; cyclonedx_gomod; registry ;;
# test/node: a control plane with the scheduler and a node (kubelet, CNI
# plugins, thick multus, containerd v2, CRI-O), helm, and for TestReleaseOnNode the release's tools
# and registry.
test-node) etcd; kube; helm; cni; multus; containerd; crio; registry; cosign; cyclonedx_gomod ;;
path) path "${2:-}" ;;
lint-path) # where `lint` puts the binary, for the Makefile
	v=$(version "$tools/golangci-lint" github.com/golangci/golangci-lint/v2)
	echo "$cache/golangci-lint-$v/golangci-lint" ;;
all) etcd; kube; helm; helm_docs; lint; cni; whereabouts; multus; openshift_api; containerd; crio; registry; cosign; cyclonedx_gomod ;;
*) echo "usage: $0 [kube|controlplane|etcd|helm|helm-docs|lint|cni|whereabouts|multus|openshift-api|containerd|crio|registry|cosign|cyclonedx-gomod|release|test-e2e|test-node|test-chart|test-release|all|path TOOL]" >&2; exit 2 ;;
esac
