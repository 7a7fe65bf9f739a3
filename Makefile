# sweep: see README.md. `make test` is the test command; CI runs it via .ci/run.

GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -s -w -X github.com/sweep-k8s/sweep/internal/version.version=$(VERSION) \
	-X github.com/sweep-k8s/sweep/internal/version.revision=$(REVISION)
# Integration tests start real control planes; a cold, race-enabled run on two
# cores needs more than go test's default ten minutes per package.
TESTFLAGS ?= -race -timeout 45m

.PHONY: all build kube deps test unit vet lint demo clean docs release release-publish release-verify \
	test-e2e test-node test-chart test-release test-docs

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# Build the harness binaries (etcd, kube-apiserver, kube-controller-manager,
# kubectl, ...) once per version into $(SWEEP_TOOLS_DIR) or ~/.cache/sweep/tools.
kube:
	hack/build-tools.sh all

vet:
	$(GO) vet ./...

# golangci-lint, built from the module proxy like the harness binaries;
# configuration in .golangci.yml.
lint:
	hack/build-tools.sh lint
	$$(hack/build-tools.sh lint-path) run ./...

# test/e2e/hostclock sets the host's wall clock, which every test's daemon would
# see: it runs alone, after all the others.
HOSTCLOCK_PKG = github.com/sweep-k8s/sweep/test/e2e/hostclock
# The Debian packages the tests run (containerd, runc, iptables, promtool,
# ...): installed when missing and root, else the one command to run.
deps:
	hack/install-deps.sh

test: deps kube vet lint
	$(GO) test $(TESTFLAGS) $$($(GO) list ./... | grep -vx '$(HOSTCLOCK_PKG)')
	$(GO) test $(TESTFLAGS) $(HOSTCLOCK_PKG)

# One test package each (docs/development.md), building only the tools its
# tests run (hack/build-tools.sh test-PKG); make test runs them all, and the
# rest.
# sweepd against a control plane, and the harness's own tests; the hostclock
# package alone and last, as in make test.
test-e2e: deps
	hack/build-tools.sh test-e2e
	$(GO) test $(TESTFLAGS) $$($(GO) list ./test/e2e/... ./test/framework/... | grep -vx '$(HOSTCLOCK_PKG)')
	$(GO) test $(TESTFLAGS) $(HOSTCLOCK_PKG)

# sweep on a real node (root): containerd, runc, the kubelet.
test-node: deps
	hack/build-tools.sh test-node
	$(GO) test $(TESTFLAGS) ./test/node/...

# The chart: helm lint and template, its values, its admission by the API
# server, its uninstall, promtool's rules tests, the dashboard.
test-chart: deps
	hack/build-tools.sh test-chart
	$(GO) test $(TESTFLAGS) ./test/chart/...

# The release: archives, SBOMs, the image, publishing to a registry,
# signatures, the Dockerfile and the workflows.
test-release:
	hack/build-tools.sh test-release
	$(GO) test $(TESTFLAGS) ./test/release/...

# The docs' checks: the flag reference, links and anchors, examples and
# reasons in step with the code. No tool.
test-docs:
	$(GO) test $(TESTFLAGS) ./test/docs/...

# Every test that needs no control plane or other harness binary (make kube),
# for the edit-test loop: under two minutes on a warm build cache. It is every
# package but those under test/: tests that need the harness live there (the
# harness itself in test/framework), and so does test/e2e/hostclock, which sets
# the host's clock and runs only alone (make test).
UNIT_PKGS = $$($(GO) list ./... | grep -v '^github.com/sweep-k8s/sweep/test\(/\|$$\)')
unit:
	$(GO) test -race $(UNIT_PKGS)

clean:
	rm -rf $(BIN) dist

# Release archives of the kubectl plugin for linux, darwin and windows on
# amd64 and arm64 with a krew manifest, of sweepd (with its systemd unit) for
# linux on amd64 and arm64, their SBOMs and sha256 checksums, in dist/.
release:
	hack/build-tools.sh cyclonedx-gomod
	VERSION=$(VERSION) REVISION=$(REVISION) hack/release.sh archives

# Publish VERSION (v<the chart's version>) to the OCI registry REGISTRY
# (default ghcr.io): the image index REGISTRY/sweep-k8s/sweep (linux/amd64,
# linux/arm64), the chart oci://REGISTRY/sweep-k8s/charts/sweep, the SBOMs,
# and cosign's signatures (keyless, or COSIGN_KEY); release-verify checks
# them (keyless, or COSIGN_PUB). Settings: hack/release.sh and docs/release.md.
# .github/workflows/release.yaml runs release, release-publish and
# release-verify on a tag; the tests run them against a registry of their own.
release-publish:
	hack/build-tools.sh release
	VERSION=$(VERSION) REVISION=$(REVISION) hack/release.sh publish

release-verify:
	hack/build-tools.sh cosign
	VERSION=$(VERSION) hack/release.sh verify

# Regenerate the flag reference, docs/reference/flags.md, from the commands'
# --help, and the chart's README from its values.yaml with helm-docs;
# test/docs/docs_test.go and test/chart/chart_test.go fail while either is stale.
docs:
	hack/build-tools.sh helm-docs
	SWEEP_UPDATE_DOCS=1 $(GO) test -count=1 -run '^(TestFlagReference|TestChartREADME)$$' ./test/docs/ ./test/chart/

# A newcomer's tour without a cluster: local control plane, a node's multus
# cache, the daemon pruning it, its metrics. It builds only what it runs:
# etcd and kube-apiserver (hack/build-tools.sh controlplane), and sweepd.
demo: build
	hack/build-tools.sh controlplane
	$(GO) run ./hack/demo -sweepd $(BIN)/sweepd
