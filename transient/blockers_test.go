package transient

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestBlockers(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "ns", UID: testJobUID}}
	pod := func(name string, mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name),
			Labels: map[string]string{batchv1.ControllerUidLabel: testJobUID}}}
		mutate(p)
		return p
	}
	event := func(name, uid, typ, reason, msg string) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			InvolvedObject: corev1.ObjectReference{UID: k8stypes.UID(uid)}, Type: typ, Reason: reason, Message: msg}
	}
	tests := []struct {
		name    string
		objects []runtime.Object
		forbid  string // resource whose list is forbidden
		want    []string
	}{
		{
			name: "quota refuses the pods",
			objects: []runtime.Object{
				event("e1", testJobUID, corev1.EventTypeWarning, "FailedCreate", `Error creating: pods "job-x" is forbidden: exceeded quota: q`),
				event("e2", testJobUID, corev1.EventTypeNormal, "SuccessfulCreate", "Created pod: job-y"),
				event("e3", "someone-else", corev1.EventTypeWarning, "FailedCreate", "not ours"),
			},
			want: []string{`Warning: job.batch/job: FailedCreate: Error creating: pods "job-x" is forbidden: exceeded quota: q`},
		},
		{
			name: "unschedulable, image pull back-off, config error",
			objects: []runtime.Object{
				pod("job-a", func(p *corev1.Pod) {
					p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are available"}}
				}),
				pod("job-b", func(p *corev1.Pod) {
					p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `configmap "cfg" not found`}}}}
					p.Status.ContainerStatuses = []corev1.ContainerStatus{
						{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}},
						{Name: "side", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "x"`}}},
					}
				}),
				event("e4", "uid-job-a", corev1.EventTypeWarning, "FailedScheduling", "0/3 nodes are available"),
			},
			want: []string{
				"Warning: pod/job-a: Unschedulable: 0/3 nodes are available",
				`Warning: pod/job-b: container init: CreateContainerConfigError: configmap "cfg" not found`,
				`Warning: pod/job-b: container side: ImagePullBackOff: Back-off pulling image "x"`,
				"Warning: pod/job-a: FailedScheduling: 0/3 nodes are available",
			},
		},
		{
			name: "events not readable: pod status still reported",
			objects: []runtime.Object{
				pod("job-a", func(p *corev1.Pod) {
					p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "no nodes"}}
				}),
			},
			forbid: "events",
			want:   []string{"Warning: pod/job-a: Unschedulable: no nodes"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset(tt.objects...)
			lists := 0
			if tt.forbid != "" {
				cs.PrependReactor("list", tt.forbid, func(k8stesting.Action) (bool, runtime.Object, error) {
					lists++
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: tt.forbid}, "", errors.New("no"))
				})
			}
			var errOut bytes.Buffer
			r := &Runner{Client: cs, Out: &bytes.Buffer{}, ErrOut: &errOut, Log: slog.New(slog.DiscardHandler)}
			b := &blockers{r: r, log: r.Log, job: job, seen: map[string]bool{}}
			// Twice: each warning is printed once.
			b.scan(t.Context())
			b.scan(t.Context())
			got := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if tt.forbid != "" && lists != 1 {
				t.Errorf("forbidden %s listed %d times, want once", tt.forbid, lists)
			}
		})
	}
}
