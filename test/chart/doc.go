// Package chart tests the Helm chart, charts/sweep: helm lint and template
// with its values (ci/*.yaml, the operators' values, the schema's refusals),
// the rendered objects applied to a real API server (kubectl apply
// --dry-run=server, SubjectAccessReviews of its RBAC), the uninstall as the
// chart sets it up (sweepd's daemon and uninstall run with the chart's args
// and ServiceAccounts), the alerts' promtool rules tests (testdata/), the
// Grafana dashboard's queries against a real Prometheus scraping sweepd,
// and the README that helm-docs generates (make docs).
//
// It needs no root. Tools: hack/build-tools.sh test-chart (etcd,
// kube-apiserver, kube-controller-manager, kubectl, helm, helm-docs; make
// test-chart), and promtool and prometheus on PATH (Debian's prometheus,
// make deps). It builds sweepd itself (test/framework/testbin).
package chart
