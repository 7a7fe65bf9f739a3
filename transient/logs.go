package transient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// logStreamer follows the logs of every container of a Job's pods once the
// container has started, each line prefixed like `kubectl logs --prefix`.
// Streaming is best effort: a failed stream is logged, never fatal, because
// the Job's outcome does not depend on it.
type logStreamer struct {
	r         *Runner
	log       *slog.Logger
	job       *batchv1.Job
	finishing chan struct{}
	done      chan struct{}
	cancel    context.CancelFunc
}

// startLogs starts following the Job's pods until finish is called.
func (r *Runner) startLogs(ctx context.Context, log *slog.Logger, job *batchv1.Job) *logStreamer {
	ctx, cancel := context.WithCancel(ctx)
	s := &logStreamer{r: r, log: log, job: job, finishing: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go s.run(ctx)
	return s
}

// finish picks up the containers that started since the last look, lets the
// streams of terminated containers drain for at most grace, then stops all.
func (s *logStreamer) finish(grace time.Duration) {
	close(s.finishing)
	select {
	case <-s.done:
	case <-time.After(grace):
	}
	s.cancel()
	<-s.done
}

func (s *logStreamer) run(ctx context.Context) {
	defer close(s.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	pods := s.r.Client.CoreV1().Pods(s.job.Namespace)
	sel := metav1.ListOptions{LabelSelector: batchv1.ControllerUidLabel + "=" + string(s.job.UID)}
	started := map[string]bool{}
	scan := func() {
		list, err := pods.List(ctx, sel)
		if err != nil {
			s.log.Debug("list job pods for logs", "error", err)
			return
		}
		s.log.Debug("looking for containers to stream logs of", "pods", len(list.Items))
		for _, p := range list.Items {
			statuses := append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
			for _, cs := range statuses {
				if cs.State.Running == nil && cs.State.Terminated == nil {
					continue
				}
				// Each run of a container has its own stream: one that
				// restarted (restartPolicy OnFailure, restartable init
				// containers) is followed again from its new start.
				key := fmt.Sprintf("%s/%s/%d", p.Name, cs.Name, cs.RestartCount)
				if started[key] {
					continue
				}
				started[key] = true
				wg.Go(func() { s.follow(ctx, p.Name, cs.Name) })
			}
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		scan()
		select {
		case <-ctx.Done():
			return
		case <-s.finishing:
			// A container that ran between two looks still has its logs.
			scan()
			return // the deferred wg.Wait lets the streams drain
		case <-tick.C:
		}
	}
}

func (s *logStreamer) follow(ctx context.Context, pod, container string) {
	req := s.r.Client.CoreV1().Pods(s.job.Namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true})
	s.log.Debug("streaming logs", "pod", pod, "container", container)
	stream, err := req.Stream(ctx)
	if err != nil {
		s.log.Warn("stream logs", "pod", pod, "container", container, "error", err)
		return
	}
	defer stream.Close()
	prefix := "[pod/" + pod + "/" + container + "] "
	br := bufio.NewReader(stream)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			s.r.writeLine(prefix + strings.TrimSuffix(line, "\n"))
		}
		if err != nil {
			s.log.Debug("log stream ended", "pod", pod, "container", container, "error", err)
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				s.log.Warn("stream logs", "pod", pod, "container", container, "error", err)
			}
			return
		}
	}
}
