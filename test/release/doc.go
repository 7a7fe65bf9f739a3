// Package release tests the release pipeline: the archives of make release
// with their SBOMs and checksums, the image built from the Dockerfile's
// final stage, make release-publish into a real registry of the test's own
// (the image index, the chart, the SBOM attestations, cosign's signatures)
// and make release-verify, the Dockerfile's build and its context, and the
// workflows (.github/workflows/release.yaml and ci.yaml).
//
// It needs no root and no control plane. Tools: hack/build-tools.sh
// test-release (helm, cosign, cyclonedx-gomod, and distribution's registry;
// make test-release).
package release
