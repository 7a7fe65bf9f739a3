package transient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
)

// blockerInterval is how often the runner looks for what blocks the Job.
// Events and pod conditions change in seconds, and a user waiting for an
// image pull error wants it within a few.
const blockerInterval = 2 * time.Second

// reportBlockers tells, until ctx ends, what keeps the Job's pods from
// running, each once, as "Warning: ..." lines on ErrOut, as kubectl prints
// what the server warns about: the Warning events of the Job (pods refused by
// admission or quota: FailedCreate) and of its pods (FailedScheduling,
// image pulls, mounts), a pod's Unschedulable condition, and containers
// waiting for a reason other than being created. It never ends the wait:
// many of these clear by themselves (a quota freed, a node added), and
// --timeout is the user's limit. Reading is best effort: a source the user
// may not list is skipped after one debug line.
func (r *Runner) reportBlockers(ctx context.Context, log *slog.Logger, job *batchv1.Job) {
	b := &blockers{r: r, log: log, job: job, seen: map[string]bool{}}
	tick := time.NewTicker(blockerInterval)
	defer tick.Stop()
	for {
		b.scan(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

type blockers struct {
	r                *Runner
	log              *slog.Logger
	job              *batchv1.Job
	seen             map[string]bool
	noPods, noEvents bool
}

func (b *blockers) warn(format string, args ...any) {
	line := "Warning: " + fmt.Sprintf(format, args...)
	if b.seen[line] {
		return
	}
	b.seen[line] = true
	b.r.warnLine(line)
}

// skip reports whether err ends reading a source for good (no right to it).
func (b *blockers) skip(what string, err error) bool {
	if apierrors.IsForbidden(err) {
		b.log.Debug("cannot look for what blocks the job", "what", what, "error", err)
		return true
	}
	if err != nil && !isCancel(err) {
		b.log.Debug("look for what blocks the job", "what", what, "error", err)
	}
	return false
}

func (b *blockers) scan(ctx context.Context) {
	ns := b.job.Namespace
	type object struct {
		ref string
		uid types.UID
	}
	objects := []object{{ref: "job.batch/" + b.job.Name, uid: b.job.UID}}
	if !b.noPods {
		pods, err := b.r.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(b.job.UID)})
		b.noPods = b.skip("pods", err)
		if err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				objects = append(objects, object{ref: "pod/" + p.Name, uid: p.UID})
				b.podStatus(p)
			}
		}
	}
	for _, o := range objects {
		if b.noEvents {
			return
		}
		sel := fields.AndSelectors(
			fields.OneTermEqualSelector("involvedObject.uid", string(o.uid)),
			fields.OneTermEqualSelector("type", corev1.EventTypeWarning),
		).String()
		events, err := b.r.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		b.noEvents = b.skip("events", err)
		if err != nil {
			continue
		}
		for _, ev := range events.Items {
			// Filtered here too: not every server (nor the fake clientset)
			// applies field selectors.
			if ev.InvolvedObject.UID == o.uid && ev.Type == corev1.EventTypeWarning {
				b.warn("%s: %s: %s", o.ref, ev.Reason, ev.Message)
			}
		}
	}
}

// podStatus reports what the scheduler and the kubelet say in the pod's
// status, which holds also when events have expired or are not readable.
func (b *blockers) podStatus(p *corev1.Pod) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			b.warn("pod/%s: %s: %s", p.Name, c.Reason, c.Message)
		}
	}
	statuses := append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		w := cs.State.Waiting
		if w == nil || w.Reason == "" || w.Reason == "ContainerCreating" || w.Reason == "PodInitializing" {
			continue
		}
		b.warn("pod/%s: container %s: %s: %s", p.Name, cs.Name, w.Reason, w.Message)
	}
}

func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
