// Package docs checks the documentation against the code: the flag
// reference (docs/reference/flags.md) against the commands' --help (make
// docs regenerates it), every link and anchor of the README and docs/ and
// every URL of this repository, the cleanup config examples parsed by
// sweepd's parser, and a row in prune.md for every prune reason.
//
// It needs no root, no control plane and no tool of hack/build-tools.sh; it
// builds the commands itself (test/framework/testbin). make test-docs.
package docs
