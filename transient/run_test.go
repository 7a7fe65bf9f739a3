package transient

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// These tests use a fake clientset for what a real control plane cannot be
// made to do on cue: a signal between two particular requests, a request
// failing. The end-to-end behaviour is in e2e_test.go.

const testJobUID = "11111111-2222-3333-4444-555555555555"

func newFake(t *testing.T) *fake.Clientset {
	t.Helper()
	cs := fake.NewClientset()
	// The fake assigns no UIDs; the ConfigMap's ownerReference needs one.
	cs.PrependReactor("create", "jobs", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*batchv1.Job).UID = testJobUID
		return false, nil, nil
	})
	return cs
}

func imageOptions() Options {
	return Options{
		Namespace: "ns", ConfigMapName: "cm", JobName: "job", Image: "img", TTLAfterFinished: time.Minute,
		Data: Data{Data: map[string]string{"k": "v"}},
	}
}

// verbs lists the requests made, as "verb resource".
func verbs(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

func checkJobDelete(t *testing.T, a k8stesting.Action) {
	t.Helper()
	d, ok := a.(k8stesting.DeleteAction)
	if !ok || d.GetResource() != (schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}) {
		t.Fatalf("last request %v, want a job deletion", a)
	}
	opts := d.GetDeleteOptions()
	if opts.PropagationPolicy == nil || *opts.PropagationPolicy != metav1.DeletePropagationBackground {
		t.Errorf("propagation %v, want Background", opts.PropagationPolicy)
	}
	if opts.Preconditions == nil || opts.Preconditions.UID == nil || *opts.Preconditions.UID != testJobUID {
		t.Errorf("preconditions %v, want the job's UID", opts.Preconditions)
	}
}

func TestRunInterruptedBeforeStart(t *testing.T) {
	cs := newFake(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// The signal arrives while the ConfigMap is being created.
	cs.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		cancel()
		return false, nil, nil
	})
	var out bytes.Buffer
	r := &Runner{Client: cs, Out: &out, Log: slog.New(slog.DiscardHandler)}
	err := r.Run(ctx, imageOptions())
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	// The ConfigMap request completed although the context was cancelled
	// in flight, the Job was never started, and it was deleted.
	want := []string{"create jobs", "create configmaps", "delete jobs"}
	if got := verbs(cs); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("requests %v, want %v", got, want)
	}
	created := cs.Actions()[0].(k8stesting.CreateAction).GetObject().(*batchv1.Job)
	if p := created.Spec.Parallelism; p == nil || *p != 0 || created.Spec.Suspend != nil {
		t.Errorf("job created with parallelism %v, suspend %v: want 0 and not suspended", p, created.Spec.Suspend)
	}
	if created.Annotations[StartSpecAnnotation] != `{"parallelism":1,"activeDeadlineSeconds":null,"ttlSecondsAfterFinished":60}` {
		t.Errorf("start spec annotation %q", created.Annotations[StartSpecAnnotation])
	}
	cm := cs.Actions()[1].(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap)
	if len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != testJobUID {
		t.Errorf("configmap owner references %+v", cm.OwnerReferences)
	}
	if cm.Labels[RunLabel] == "" || cm.Labels[RunLabel] != created.Labels[RunLabel] {
		t.Errorf("run labels: configmap %q, job %q", cm.Labels[RunLabel], created.Labels[RunLabel])
	}
	checkJobDelete(t, cs.Actions()[2])
	if !strings.Contains(out.String(), "job.batch/job deleted") {
		t.Errorf("output:\n%s", &out)
	}
}

func TestRunInterruptedBeforeAnything(t *testing.T) {
	cs := newFake(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := &Runner{Client: cs, Out: &bytes.Buffer{}, Log: slog.New(slog.DiscardHandler)}
	if err := r.Run(ctx, imageOptions()); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err = %v, want ErrInterrupted", err)
	}
	if got := verbs(cs); len(got) != 0 {
		t.Fatalf("requests %v, want none", got)
	}
}

func TestRunConfigMapCreateFails(t *testing.T) {
	cs := newFake(t)
	cs.PrependReactor("create", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "cm", errors.New("no"))
	})
	r := &Runner{Client: cs, Out: &bytes.Buffer{}, Log: slog.New(slog.DiscardHandler)}
	err := r.Run(t.Context(), imageOptions())
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "create configmap") {
		t.Fatalf("err = %v, want the forbidden configmap creation", err)
	}
	want := []string{"create jobs", "create configmaps", "delete jobs"}
	if got := verbs(cs); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("requests %v, want %v", got, want)
	}
	checkJobDelete(t, cs.Actions()[2])
}

func TestLogStreamer(t *testing.T) {
	pod := func(name string, state corev1.ContainerState) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{batchv1.ControllerUidLabel: testJobUID}},
			Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "c", State: state}}},
		}
	}
	cs := fake.NewClientset(
		pod("done", corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}),
		pod("waiting", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}),
	)
	var out bytes.Buffer
	r := &Runner{Client: cs, Out: &out, Log: slog.New(slog.DiscardHandler)}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "ns", UID: testJobUID}}
	s := r.startLogs(t.Context(), r.Log, job)
	s.finish(5 * time.Second)
	// The fake serves "fake logs" for any container; only the started one is
	// asked for.
	if got, want := out.String(), "[pod/done/c] fake logs\n"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// TestRunStartFailsWithoutGC: the start is refused, and no garbage
// collector runs (the fake has none), so after GCTimeout the runner deletes
// the ConfigMap itself, guarded by its UID.
func TestRunStartFailsWithoutGC(t *testing.T) {
	cs := newFake(t)
	cs.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).UID = "cm-uid"
		return false, nil, nil
	})
	cs.PrependReactor("patch", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("try later")
	})
	var out bytes.Buffer
	r := &Runner{Client: cs, Out: &out, Log: slog.New(slog.DiscardHandler), GCTimeout: 300 * time.Millisecond}
	err := r.Run(t.Context(), imageOptions())
	if err == nil || !strings.Contains(err.Error(), "start job") {
		t.Fatalf("err = %v, want the failed start", err)
	}
	got := verbs(cs)
	if got[0] != "create jobs" || got[1] != "create configmaps" || got[2] != "patch jobs" || got[3] != "delete jobs" {
		t.Fatalf("requests %v", got)
	}
	checkJobDelete(t, cs.Actions()[3])
	last := cs.Actions()[len(got)-1]
	d, ok := last.(k8stesting.DeleteAction)
	if !ok || d.GetResource().Resource != "configmaps" || d.GetName() != "cm" {
		t.Fatalf("last request %v, want the configmap's deletion", last)
	}
	if p := d.GetDeleteOptions().Preconditions; p == nil || p.UID == nil || *p.UID != "cm-uid" {
		t.Errorf("configmap deleted without its UID as precondition: %+v", p)
	}
	if _, err := cs.CoreV1().ConfigMaps("ns").Get(t.Context(), "cm", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("configmap left: %v", err)
	}
	if !strings.Contains(out.String(), "configmap/cm deleted") {
		t.Errorf("output:\n%s", &out)
	}
}

// TestRunOutcomes drives whole runs against the fake, for the race detector's
// sake: the watch, the log streams and the step output run concurrently. A
// goroutine plays the Job controller once the Job is started.
func TestRunOutcomes(t *testing.T) {
	tests := []struct {
		name      string
		condition batchv1.JobConditionType // "" leaves the Job running
		reason    string
		timeout   time.Duration
		wantErr   error
		wantLine  string
	}{
		{name: "complete", condition: batchv1.JobComplete, wantLine: "job.batch/job condition met (Complete)"},
		{name: "failed", condition: batchv1.JobFailed, reason: "BackoffLimitExceeded", wantErr: ErrJobFailed, wantLine: "job.batch/job condition met (Failed: BackoffLimitExceeded)"},
		{name: "timeout", timeout: 500 * time.Millisecond, wantErr: ErrTimeout, wantLine: "job.batch/job not finished after 500ms"},
		// The Job controller enforces --timeout as activeDeadlineSeconds
		// and may get there first: still a timeout.
		{name: "deadline of --timeout", condition: batchv1.JobFailed, reason: batchv1.JobReasonDeadlineExceeded, timeout: time.Hour, wantErr: ErrTimeout, wantLine: "job.batch/job not finished after 1h0m0s"},
		// Without --timeout the deadline is the template's: a failure.
		{name: "deadline of the template", condition: batchv1.JobFailed, reason: batchv1.JobReasonDeadlineExceeded, wantErr: ErrJobFailed, wantLine: "job.batch/job condition met (Failed: DeadlineExceeded)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := newFake(t)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "job-abcde", Namespace: "ns", Labels: map[string]string{batchv1.ControllerUidLabel: testJobUID}},
				Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "job", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
			}
			if _, err := cs.CoreV1().Pods("ns").Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				if tt.condition == "" {
					return
				}
				jobs := cs.BatchV1().Jobs("ns")
				for t.Context().Err() == nil {
					job, err := jobs.Get(t.Context(), "job", metav1.GetOptions{})
					if err == nil && job.Annotations[StartSpecAnnotation] == "" && *job.Spec.Parallelism == 1 {
						job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{
							Type: tt.condition, Status: corev1.ConditionTrue, Reason: tt.reason,
						})
						if _, err := jobs.UpdateStatus(t.Context(), job, metav1.UpdateOptions{}); err == nil {
							return
						}
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
			var out bytes.Buffer
			r := &Runner{Client: cs, Out: &out, Log: slog.New(slog.DiscardHandler), GCTimeout: 200 * time.Millisecond}
			o := imageOptions()
			o.Logs = true
			o.Timeout = tt.timeout
			err := r.Run(t.Context(), o)
			<-done
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			for _, line := range []string{tt.wantLine, "[pod/job-abcde/job] fake logs", "job.batch/job deleted", "configmap/cm deleted"} {
				if !strings.Contains(out.String(), line+"\n") {
					t.Errorf("output lacks %q:\n%s", line, &out)
				}
			}
			jobs, _ := cs.BatchV1().Jobs("ns").List(t.Context(), metav1.ListOptions{})
			cms, _ := cs.CoreV1().ConfigMaps("ns").List(t.Context(), metav1.ListOptions{})
			if len(jobs.Items)+len(cms.Items) != 0 {
				t.Errorf("left: %d jobs, %d configmaps", len(jobs.Items), len(cms.Items))
			}
		})
	}
}

// TestPrepare: the setup form runs nothing and expires by itself; the start
// spec restores the template's values, with --timeout as the deadline when
// it is the shorter.
func TestPrepare(t *testing.T) {
	tests := []struct {
		name           string
		parallelism    *int32
		deadline       *int64
		suspend        *bool
		timeout        time.Duration
		want           StartSpec
		wantAnnotation string
	}{
		{name: "defaults", want: StartSpec{Parallelism: 1, TTLSecondsAfterFinished: 600},
			wantAnnotation: `{"parallelism":1,"activeDeadlineSeconds":null,"ttlSecondsAfterFinished":600}`},
		{name: "template's parallelism and deadline", parallelism: new(int32(3)), deadline: new(int64(100)),
			want:           StartSpec{Parallelism: 3, ActiveDeadlineSeconds: new(int64(100)), TTLSecondsAfterFinished: 600},
			wantAnnotation: `{"parallelism":3,"activeDeadlineSeconds":100,"ttlSecondsAfterFinished":600}`},
		{name: "timeout shorter than the template's deadline", deadline: new(int64(100)), timeout: 1500 * time.Millisecond,
			want:           StartSpec{Parallelism: 1, ActiveDeadlineSeconds: new(int64(2)), TTLSecondsAfterFinished: 600, TimeoutIsDeadline: true},
			wantAnnotation: `{"parallelism":1,"activeDeadlineSeconds":2,"ttlSecondsAfterFinished":600}`},
		{name: "timeout longer than the template's deadline", deadline: new(int64(100)), timeout: time.Hour,
			want:           StartSpec{Parallelism: 1, ActiveDeadlineSeconds: new(int64(100)), TTLSecondsAfterFinished: 600},
			wantAnnotation: `{"parallelism":1,"activeDeadlineSeconds":100,"ttlSecondsAfterFinished":600}`},
		{name: "a suspended template is started all the same", suspend: new(true),
			want:           StartSpec{Parallelism: 1, TTLSecondsAfterFinished: 600},
			wantAnnotation: `{"parallelism":1,"activeDeadlineSeconds":null,"ttlSecondsAfterFinished":600}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := &batchv1.Job{Spec: batchv1.JobSpec{Parallelism: tt.parallelism, ActiveDeadlineSeconds: tt.deadline, Suspend: tt.suspend}}
			r := &Runner{RequestTimeout: 10 * time.Second}
			got, err := r.prepare(job, Options{Timeout: tt.timeout, TTLAfterFinished: 10 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("start spec %+v, want %+v", got, tt.want)
			}
			if a := job.Annotations[StartSpecAnnotation]; a != tt.wantAnnotation {
				t.Errorf("annotation %s, want %s", a, tt.wantAnnotation)
			}
			// Setup form: no pod, a deadline of 3 request timeouts + 5 s,
			// deleted as soon as it fails.
			if sp := job.Spec; sp.Suspend != nil || *sp.Parallelism != 0 || *sp.ActiveDeadlineSeconds != 35 || *sp.TTLSecondsAfterFinished != 0 {
				t.Errorf("setup form suspend %v, parallelism %d, activeDeadlineSeconds %d, ttl %d; want nil, 0, 35, 0",
					sp.Suspend, *sp.Parallelism, *sp.ActiveDeadlineSeconds, *sp.TTLSecondsAfterFinished)
			}
		})
	}
}
