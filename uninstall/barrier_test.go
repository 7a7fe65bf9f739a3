package uninstall

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

func testPod(node, phase string, owner types.UID, controller bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"nodeName": node}, "status": map[string]any{"phase": phase},
	}}
	u.SetOwnerReferences([]metav1.OwnerReference{{UID: owner, Controller: &controller}})
	return u
}

func testReport(node, content string, at time.Time, failed string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetLabels(map[string]string{LabelRole: RoleNode})
	u.SetAnnotations(map[string]string{
		AnnotationNode: node, AnnotationContent: content, AnnotationReportedAt: at.Format(time.RFC3339Nano), AnnotationFailedFiles: failed,
	})
	return u
}

func TestEvaluateBarrier(t *testing.T) {
	const ds, other = types.UID("ds"), types.UID("other")
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name         string
		pods, leases []*unstructured.Unstructured
		want         BarrierState
	}{
		{
			name: "nothing scheduled, nothing reported",
			want: BarrierState{},
		},
		{
			name: "all reported",
			pods: []*unstructured.Unstructured{testPod("a", "Running", ds, true), testPod("b", "Pending", ds, true)},
			leases: []*unstructured.Unstructured{
				testReport("b", "h1", t0.Add(time.Second), "2"), testReport("a", "h1", t0, "0"),
			},
			want: BarrierState{Expected: []string{"a", "b"}, Reported: []string{"a", "b"}, FailedFiles: 2, FirstReport: t0},
		},
		{
			name: "a report of other content does not count",
			pods: []*unstructured.Unstructured{testPod("a", "Running", ds, true), testPod("b", "Running", ds, true)},
			leases: []*unstructured.Unstructured{
				testReport("a", "h1", t0, "0"), testReport("b", "h0", t0.Add(-time.Hour), "0"),
			},
			want: BarrierState{Expected: []string{"a", "b"}, Reported: []string{"a"}, Missing: []string{"b"}, FirstReport: t0},
		},
		{
			name: "unbound, finished and foreign pods are not waited for",
			pods: []*unstructured.Unstructured{
				testPod("", "Pending", ds, true), testPod("b", "Succeeded", ds, true), testPod("c", "Failed", ds, true),
				testPod("d", "Running", other, true), testPod("e", "Running", ds, false), testPod("f", "Running", ds, true),
			},
			want: BarrierState{Expected: []string{"f"}, Missing: []string{"f"}},
		},
		{
			name: "a node that reported and lost its pod still counts as reported",
			pods: []*unstructured.Unstructured{testPod("a", "Running", ds, true)},
			leases: []*unstructured.Unstructured{
				testReport("a", "h1", t0, "x"), testReport("gone", "h1", t0.Add(-time.Minute), "1"),
			},
			want: BarrierState{Expected: []string{"a"}, Reported: []string{"a", "gone"}, FailedFiles: 1, FirstReport: t0.Add(-time.Minute)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EvaluateBarrier(ds, "h1", tt.pods, tt.leases)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
			if got.Reached() != (len(tt.want.Missing) == 0) {
				t.Fatalf("Reached() = %v", got.Reached())
			}
		})
	}
}

func TestNames(t *testing.T) {
	long := ""
	for len(long) < 250 {
		long += "abcdefghij"
	}
	tests := []struct{ ds, node string }{{"sweep", "node-a"}, {long, "node-a"}, {long, long}}
	for _, tt := range tests {
		for _, n := range []string{NodeLeaseName(tt.ds, tt.node), LeaderLeaseName(tt.ds), StatusLeaseName(tt.ds)} {
			if len(n) > 253 {
				t.Errorf("%q: %d characters", n, len(n))
			}
		}
		if l := DaemonSetLabel(tt.ds); len(l) > 63 {
			t.Errorf("label %q too long", l)
		}
	}
	if NodeLeaseName("sweep", "node-a") == NodeLeaseName("sweep", "node-b") {
		t.Error("two nodes share a report Lease")
	}
	if NodeLeaseName(long, "a") == NodeLeaseName(long+"x", "a") {
		t.Error("two DaemonSets share a report Lease")
	}
}
