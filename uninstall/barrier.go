package uninstall

import (
	"sort"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// BarrierState is the barrier evaluated at one moment.
type BarrierState struct {
	// Expected are the nodes running a pod of the DaemonSet.
	Expected []string
	// Reported are the nodes that finished this content.
	Reported []string
	// Missing are Expected nodes that have not reported.
	Missing []string
	// FailedFiles sums the files the reporting nodes failed to remove.
	FailedFiles int
	// FirstReport is the earliest report of this content; the timeout
	// counts from it. Zero when nobody reported.
	FirstReport time.Time
}

// Reached reports whether every expected node has reported.
func (b BarrierState) Reached() bool { return len(b.Missing) == 0 }

// EvaluateBarrier computes the barrier for content from the DaemonSet's
// pods and the node report Leases. A node is expected when a pod controlled
// by the DaemonSet (UID dsUID) is bound to it and not finished; a node
// whose pod is gone (node drained or deleted) is not waited for. A report
// counts only for the same content.
func EvaluateBarrier(dsUID types.UID, content string, pods, leases []*unstructured.Unstructured) BarrierState {
	var b BarrierState
	expected := map[string]bool{}
	for _, p := range pods {
		node, _, _ := unstructured.NestedString(p.Object, "spec", "nodeName")
		phase, _, _ := unstructured.NestedString(p.Object, "status", "phase")
		if node == "" || phase == "Succeeded" || phase == "Failed" {
			continue
		}
		for _, r := range p.GetOwnerReferences() {
			if r.UID == dsUID && r.Controller != nil && *r.Controller {
				expected[node] = true
			}
		}
	}
	reported := map[string]bool{}
	for _, l := range leases {
		a := l.GetAnnotations()
		if l.GetLabels()[LabelRole] != RoleNode || a[AnnotationContent] != content || a[AnnotationNode] == "" {
			continue
		}
		reported[a[AnnotationNode]] = true
		if n, err := strconv.Atoi(a[AnnotationFailedFiles]); err == nil {
			b.FailedFiles += n
		}
		at, err := time.Parse(time.RFC3339Nano, a[AnnotationReportedAt])
		if err != nil {
			at = l.GetCreationTimestamp().Time
		}
		if b.FirstReport.IsZero() || at.Before(b.FirstReport) {
			b.FirstReport = at
		}
	}
	for n := range expected {
		b.Expected = append(b.Expected, n)
		if !reported[n] {
			b.Missing = append(b.Missing, n)
		}
	}
	for n := range reported {
		b.Reported = append(b.Reported, n)
	}
	sort.Strings(b.Expected)
	sort.Strings(b.Reported)
	sort.Strings(b.Missing)
	return b
}
