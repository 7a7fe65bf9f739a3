// Module openshift-api holds no tool: it pins github.com/openshift/api,
// whose SecurityContextConstraints CRD (security/v1's generated manifests)
// test/chart installs into a real API server to check the chart's SCC. It
// is a separate module: nothing of it is linked.
module github.com/sweep-k8s/sweep/hack/tools/openshift-api

go 1.26.8

require github.com/openshift/api v0.0.0-20260318185450-1f2fa3f09f4e
