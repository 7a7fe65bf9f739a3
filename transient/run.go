// Package transient runs a Job together with a ConfigMap that cannot outlive
// it: the ConfigMap is owned by the Job, so the garbage collector deletes it
// with the Job whether or not the client that made them is still alive.
//
// The order is what makes it crash-safe, and every object that a dead client
// leaves is removed by the cluster itself within a bound. The Job is created
// not started: parallelism 0, so no pod runs without the ConfigMap, but with
// an activeDeadlineSeconds of its own (the setup deadline, see
// Runner.SetupDeadline) and ttlSecondsAfterFinished 0. Then the ConfigMap is
// created with an ownerReference to the Job's UID, then the Job is started:
// its parallelism, activeDeadlineSeconds and TTL become those of the run (as
// recorded in StartSpecAnnotation). A client that dies before the start
// leaves a Job that the Job controller fails at the setup deadline and the
// TTL controller deletes at once, its ConfigMap with it; a client that dies
// later leaves a running Job, whose ConfigMap goes when the Job finishes (at
// the latest at --timeout, which becomes its activeDeadlineSeconds) and its
// ttlSecondsAfterFinished runs out.
package transient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Errors that Run wraps, for the plugin's exit code.
var (
	// ErrJobFailed: the Job reached its Failed condition.
	ErrJobFailed = errors.New("job failed")
	// ErrTimeout: --timeout ran out before the Job finished.
	ErrTimeout = errors.New("timed out waiting for the job")
	// ErrInterrupted: the context was cancelled (SIGINT or SIGTERM).
	ErrInterrupted = errors.New("interrupted")
)

// Options is one run.
type Options struct {
	// Namespace of the Job and the ConfigMap.
	Namespace string
	// ConfigMapName is the ConfigMap's name, or with Isolate the prefix of
	// its unique name.
	ConfigMapName string
	// Data is the ConfigMap's content.
	Data Data
	// JobName is the Job's name.
	JobName string
	// CronJob, when set, is the CronJob whose job template the Job copies.
	CronJob string
	// Image, when CronJob is empty, is the image of the Job's only
	// container, and Command its command (the image's entry point if empty).
	Image   string
	Command []string
	// Timeout bounds the wait for the Job to finish; 0 means no limit. It
	// also becomes the Job's activeDeadlineSeconds (unless the template's is
	// shorter), so that the cluster ends the Job at that time even if the
	// runner is gone.
	Timeout time.Duration
	// TTLAfterFinished is the Job's ttlSecondsAfterFinished: how long a
	// finished Job (and so its ConfigMap) stays when nobody deletes it.
	TTLAfterFinished time.Duration
	// Logs streams the logs of the Job's pods to the runner's Out.
	Logs bool
	// Isolate gives the ConfigMap a unique name and points the Job's pod
	// template at it, so that no other run of the same template sees it.
	Isolate bool
}

// Validate checks what can be checked without the API server.
func (o Options) Validate() error {
	var errs []string
	check := func(what, name string, f func(string) []string) {
		if name == "" {
			errs = append(errs, what+" is required")
			return
		}
		if e := f(name); len(e) > 0 {
			errs = append(errs, fmt.Sprintf("invalid %s %q: %s", what, name, strings.Join(e, "; ")))
		}
	}
	check("namespace", o.Namespace, validation.IsDNS1123Label)
	check("configmap name", o.ConfigMapName, validation.IsDNS1123Subdomain)
	check("job name", o.JobName, validation.IsDNS1123Label)
	switch {
	case o.CronJob == "" && o.Image == "":
		errs = append(errs, "one of --job-from and --job-image is required")
	case o.CronJob != "" && o.Image != "":
		errs = append(errs, "--job-from and --job-image are mutually exclusive")
	case o.CronJob != "" && len(o.Command) > 0:
		errs = append(errs, "a command after -- needs --job-image")
	}
	if o.Timeout < 0 {
		errs = append(errs, "--timeout must not be negative")
	}
	if o.TTLAfterFinished < 0 || o.TTLAfterFinished > time.Duration(1<<31-1)*time.Second {
		errs = append(errs, "--ttl-after-finished must be between 0 and 2^31-1 seconds")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, ", "))
	}
	return nil
}

// Runner runs Jobs with transient ConfigMaps.
type Runner struct {
	// Client talks to the API server.
	Client kubernetes.Interface
	// Out receives one line per step, in kubectl's style
	// ("configmap/foo created"), and with Options.Logs the pods' logs.
	Out io.Writer
	// ErrOut receives warnings for the user, as kubectl prints them
	// ("Warning: ..."): what keeps the Job's pods from running. Nil
	// discards them.
	ErrOut io.Writer
	// Log receives diagnostics.
	Log *slog.Logger
	// RequestTimeout bounds each create, patch or delete. These run on a
	// context that an interrupt does not cancel, because a request cut off
	// in flight may still take effect on the server and leave an object
	// behind that this run no longer knows of. Default 30 s.
	RequestTimeout time.Duration
	// GCTimeout bounds the wait for the garbage collector to delete the
	// ConfigMap after the Job; past it the runner deletes the ConfigMap
	// itself. Default 2 min.
	GCTimeout time.Duration
	// AtStep, when set, is called after each step that changes what a
	// crash would leave behind (see the Step constants), with nothing
	// held: tests stop the process there to show what it leaves.
	AtStep func(step string)

	mu sync.Mutex // serialises writes to Out
}

// Steps passed to Runner.AtStep, in the order of a run.
const (
	StepJobCreated       = "job-created"
	StepConfigMapCreated = "configmap-created"
	StepJobStarted       = "job-started"
	StepJobFinished      = "job-finished"
	StepJobDeleted       = "job-deleted"
)

func (r *Runner) atStep(step string) {
	if r.AtStep != nil {
		r.AtStep(step)
	}
}

// SetupDeadline is the activeDeadlineSeconds of a Job that is not started
// yet: longer than a live runner can take from the Job's creation to its
// start (the Job's creation, the ConfigMap's, the start: three requests of at
// most RequestTimeout each), plus a margin for the Job controller's start
// time, which has whole seconds. A runner that dies before the start leaves a
// Job that fails at this deadline and is deleted at once (TTL 0).
func (r *Runner) SetupDeadline() time.Duration {
	return 3*r.requestTimeout() + 5*time.Second
}

func (r *Runner) requestTimeout() time.Duration {
	if r.RequestTimeout > 0 {
		return r.RequestTimeout
	}
	return 30 * time.Second
}

func (r *Runner) gcTimeout() time.Duration {
	if r.GCTimeout > 0 {
		return r.GCTimeout
	}
	return 2 * time.Minute
}

func (r *Runner) step(format string, args ...any) {
	r.writeLine(fmt.Sprintf(format, args...))
}

// writeLine writes one line to Out; log streams and steps run concurrently and
// must not interleave within a line.
func (r *Runner) writeLine(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintln(r.Out, s)
}

// warnLine writes one line to ErrOut.
func (r *Runner) warnLine(s string) {
	if r.ErrOut == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintln(r.ErrOut, s)
}

// op returns a context for one request that survives the cancellation of
// ctx (see RequestTimeout).
func (r *Runner) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.requestTimeout())
}

// Run creates the Job and the ConfigMap, waits for the Job and deletes both.
// It returns nil when the Job completed; an error wrapping ErrJobFailed,
// ErrTimeout or ErrInterrupted for those outcomes; another error when a
// request failed. On ErrInterrupted it deletes the Job and leaves the
// ConfigMap to the garbage collector rather than wait for it.
func (r *Runner) Run(ctx context.Context, o Options) error {
	pl, err := r.plan(ctx, o)
	if err != nil {
		return err
	}
	job, cmName, runID, start := pl.job, pl.cmName, pl.runID, pl.start
	log := r.Log.With("namespace", o.Namespace, "job", o.JobName, "configmap", cmName, "run", runID)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w before anything was created", ErrInterrupted)
	}

	created, err := r.createJob(ctx, log, job)
	if apierrors.IsAlreadyExists(err) {
		var replaced bool
		if replaced, err = r.replaceLeftover(ctx, log, o.Namespace, job.Name); replaced {
			created, err = r.createJob(ctx, log, job)
		}
	}
	if err != nil {
		return fmt.Errorf("create job: %w", err)
	}
	job = created
	r.step("job.batch/%s created (not started)", job.Name)
	log = log.With("job_uid", job.UID)
	r.atStep(StepJobCreated)
	if ctx.Err() != nil {
		return r.interrupted(ctx, log, job)
	}

	cm := newConfigMap(o, cmName, runID, job)
	opCtx, cancel := r.op(ctx)
	cm, err = r.Client.CoreV1().ConfigMaps(o.Namespace).Create(opCtx, cm, metav1.CreateOptions{FieldManager: fieldManager})
	cancel()
	if err != nil {
		err = fmt.Errorf("create configmap: %w", err)
		return errors.Join(err, r.deleteJob(ctx, log, job))
	}
	r.step("configmap/%s created", cm.Name)
	r.atStep(StepConfigMapCreated)
	if ctx.Err() != nil {
		return r.interrupted(ctx, log, job)
	}

	if err := r.startJob(ctx, job, start); err != nil {
		err = fmt.Errorf("start job: %w", err)
		return errors.Join(err, r.cleanup(ctx, log, job, cm))
	}
	r.step("job.batch/%s started", job.Name)
	r.atStep(StepJobStarted)
	log.Debug("job started, waiting", "timeout", o.Timeout)

	waitCtx, cancelWait := context.WithCancel(ctx)
	if o.Timeout > 0 {
		waitCtx, cancelWait = context.WithTimeoutCause(ctx, o.Timeout, ErrTimeout)
	}
	defer cancelWait()
	var logs *logStreamer
	if o.Logs {
		logs = r.startLogs(waitCtx, log, job)
	}
	blockersCtx, stopBlockers := context.WithCancel(waitCtx)
	blockersDone := make(chan struct{})
	go func() {
		defer close(blockersDone)
		r.reportBlockers(blockersCtx, log, job)
	}()
	final, waitErr := r.waitJob(waitCtx, job)
	stopBlockers()
	<-blockersDone
	if logs != nil {
		// Containers that terminated still flush their last lines; give them a
		// moment, not the whole TTL.
		logs.finish(5 * time.Second)
	}

	var state jobState
	var cond *batchv1.JobCondition
	if waitErr == nil {
		state, cond = stateOf(final)
		r.atStep(StepJobFinished)
	}
	// The Job controller may end the Job at the deadline that --timeout set
	// before the runner's own timer fires: the same timeout.
	deadlineHit := state == jobFailed && cond.Reason == batchv1.JobReasonDeadlineExceeded && start.TimeoutIsDeadline
	switch {
	case ctx.Err() != nil:
		return r.interrupted(ctx, log, job)
	case errors.Is(context.Cause(waitCtx), ErrTimeout) || deadlineHit:
		r.step("job.batch/%s not finished after %s", job.Name, o.Timeout)
		return errors.Join(fmt.Errorf("job %q: %w (%s)", job.Name, ErrTimeout, o.Timeout), r.cleanup(ctx, log, job, cm))
	case waitErr != nil:
		return errors.Join(fmt.Errorf("wait for job %q: %w", job.Name, waitErr), r.cleanup(ctx, log, job, cm))
	}

	var result error
	if state == jobComplete {
		r.step("job.batch/%s condition met (Complete)", job.Name)
	} else {
		r.step("job.batch/%s condition met (Failed: %s)", job.Name, cond.Reason)
		result = fmt.Errorf("job %q: %w: %s: %s", job.Name, ErrJobFailed, cond.Reason, cond.Message)
	}
	return errors.Join(result, r.cleanup(ctx, log, job, cm))
}

// plan is what a run is about to create.
type plan struct {
	job    *batchv1.Job // in its setup form
	cmName string
	runID  string
	start  StartSpec
}

// plan validates o and builds the Job of a run, reading the CronJob if
// there is one.
func (r *Runner) plan(ctx context.Context, o Options) (plan, error) {
	if err := o.Validate(); err != nil {
		return plan{}, err
	}
	runID := rand.String(5)
	cmName := o.ConfigMapName
	if o.Isolate {
		cmName = o.ConfigMapName + "-" + runID
		if errs := validation.IsDNS1123Subdomain(cmName); len(errs) > 0 {
			return plan{}, fmt.Errorf("configmap name %q too long for --isolate: %s", o.ConfigMapName, strings.Join(errs, "; "))
		}
	}
	job, err := r.buildJob(ctx, o, cmName)
	if err != nil {
		return plan{}, err
	}
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	job.Labels[RunLabel] = runID
	start, err := r.prepare(job, o)
	if err != nil {
		return plan{}, err
	}
	return plan{job: job, cmName: cmName, runID: runID, start: start}, nil
}

// DryRun returns the Job and the ConfigMap exactly as Run would create them,
// and creates nothing: the Job in its setup form (see StartSpecAnnotation).
// With server the API server answers both creations with dryRun=All, so
// admission, defaulting and validation are the cluster's, and the
// ConfigMap's owner reference has the UID that the server gave the Job in
// its answer; without, they are built locally (only the CronJob is read) and
// that UID is empty, as it is not known before the Job exists.
func (r *Runner) DryRun(ctx context.Context, o Options, server bool) (*batchv1.Job, *corev1.ConfigMap, error) {
	pl, err := r.plan(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	job := pl.job
	if server {
		opCtx, cancel := r.op(ctx)
		job, err = r.Client.BatchV1().Jobs(o.Namespace).Create(opCtx, job, metav1.CreateOptions{FieldManager: fieldManager, DryRun: []string{metav1.DryRunAll}})
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("create job (server dry run): %w", err)
		}
	}
	cm := newConfigMap(o, pl.cmName, pl.runID, job)
	if server {
		opCtx, cancel := r.op(ctx)
		cm, err = r.Client.CoreV1().ConfigMaps(o.Namespace).Create(opCtx, cm, metav1.CreateOptions{FieldManager: fieldManager, DryRun: []string{metav1.DryRunAll}})
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("create configmap (server dry run): %w", err)
		}
	}
	return job, cm, nil
}

// fieldManager names this client in the objects' managedFields.
const fieldManager = "kubectl-create-transient_configmap"

// StartSpecAnnotation is on a Job that the runner created and has not started
// yet. Its value is the JSON of the spec fields the start sets (StartSpec),
// so that whoever reads the Job sees why its parallelism is 0 and what it
// will run with; the start removes it.
const StartSpecAnnotation = "transient.sweep-k8s.io/start-spec"

// StartSpec is what starting a Job sets in its spec: the values of the run,
// in place of the setup values that keep a Job without its ConfigMap from
// running and from outliving a dead runner.
type StartSpec struct {
	// Parallelism is the template's (1 if it has none).
	Parallelism int32 `json:"parallelism"`
	// ActiveDeadlineSeconds is the template's or the run's --timeout,
	// whichever is shorter; null removes the setup deadline.
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds"`
	// TTLSecondsAfterFinished is --ttl-after-finished.
	TTLSecondsAfterFinished int32 `json:"ttlSecondsAfterFinished"`
	// TimeoutIsDeadline: ActiveDeadlineSeconds is the run's --timeout, so
	// a Job failed for DeadlineExceeded has timed out.
	TimeoutIsDeadline bool `json:"-"`
}

// prepare turns job into its setup form and returns what starting it sets.
// The setup form runs no pod (parallelism 0), fails at the setup deadline
// and is deleted right after (TTL 0): unlike a suspended Job, which never
// finishes and so never expires, it cannot outlive a runner that dies before
// the start. A template's suspend is dropped for the same reason: a manual
// run is meant to run.
func (r *Runner) prepare(job *batchv1.Job, o Options) (StartSpec, error) {
	start := StartSpec{
		Parallelism:             1,
		ActiveDeadlineSeconds:   job.Spec.ActiveDeadlineSeconds,
		TTLSecondsAfterFinished: int32(o.TTLAfterFinished / time.Second),
	}
	if p := job.Spec.Parallelism; p != nil {
		start.Parallelism = *p
	}
	if o.Timeout > 0 {
		t := int64(math.Ceil(o.Timeout.Seconds()))
		if d := start.ActiveDeadlineSeconds; d == nil || *d > t {
			start.ActiveDeadlineSeconds = &t
			start.TimeoutIsDeadline = true
		}
	}
	spec, err := json.Marshal(start)
	if err != nil {
		return StartSpec{}, fmt.Errorf("encode start spec: %w", err)
	}
	if job.Annotations == nil {
		job.Annotations = map[string]string{}
	}
	job.Annotations[StartSpecAnnotation] = string(spec)
	job.Spec.Suspend = nil
	job.Spec.Parallelism = new(int32(0))
	job.Spec.ActiveDeadlineSeconds = new(int64(math.Ceil(r.SetupDeadline().Seconds())))
	job.Spec.TTLSecondsAfterFinished = new(int32(0))
	return start, nil
}

// startJob sets the start spec and removes StartSpecAnnotation in one merge
// patch. The UID in it makes the patch fail (uid is immutable) rather than
// start a Job that replaced this one under the same name.
func (r *Runner) startJob(ctx context.Context, job *batchv1.Job, start StartSpec) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"uid":         job.UID,
			"annotations": map[string]any{StartSpecAnnotation: nil},
		},
		"spec": start,
	})
	if err != nil {
		return fmt.Errorf("encode start patch: %w", err)
	}
	opCtx, cancel := r.op(ctx)
	defer cancel()
	_, err = r.Client.BatchV1().Jobs(job.Namespace).Patch(opCtx, job.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: fieldManager})
	return err
}

// newConfigMap is the run's ConfigMap, owned by the Job. The reference has
// no blockOwnerDeletion: nothing needs the Job to wait for the ConfigMap, and
// setting it would need update on jobs/finalizers where
// OwnerReferencesPermissionEnforcement is enabled.
func newConfigMap(o Options, name, runID string, job *batchv1.Job) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: o.Namespace,
			Labels:    map[string]string{RunLabel: runID},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "batch/v1",
				Kind:       "Job",
				Name:       job.Name,
				UID:        job.UID,
				Controller: new(true),
			}},
		},
		Data:       o.Data.Data,
		BinaryData: o.Data.Binary,
	}
}

func (r *Runner) buildJob(ctx context.Context, o Options, cmName string) (*batchv1.Job, error) {
	if o.CronJob == "" {
		return JobFromImage(o.Namespace, o.JobName, o.Image, o.Command, cmName), nil
	}
	opCtx, cancel := r.op(ctx)
	defer cancel()
	cj, err := r.Client.BatchV1().CronJobs(o.Namespace).Get(opCtx, o.CronJob, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get cronjob: %w", err)
	}
	job := JobFromCronJob(cj, o.JobName)
	if o.Isolate {
		if RenameConfigMap(&job.Spec.Template.Spec, o.ConfigMapName, cmName) == 0 {
			return nil, fmt.Errorf("--isolate: the pod template of cronjob %q does not reference configmap %q", o.CronJob, o.ConfigMapName)
		}
	}
	return job, nil
}

// waitJob watches the Job until it is Complete or Failed. The informer behind
// UntilWithSync re-lists and re-watches across API server restarts and
// expired resource versions, so a long wait survives both.
func (r *Runner) waitJob(ctx context.Context, job *batchv1.Job) (*batchv1.Job, error) {
	jobs := r.Client.BatchV1().Jobs(job.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", job.Name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel
			return jobs.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return jobs.Watch(ctx, opts)
		},
	}
	var final *batchv1.Job
	// The wrapper passes on whether the client can stream lists (fake
	// clientsets cannot), as generated informers do.
	lwc := cache.ToListWatcherWithWatchListSemantics(lw, r.Client)
	_, err := watchtools.UntilWithSync(ctx, lwc, &batchv1.Job{}, nil, func(ev watch.Event) (bool, error) {
		switch ev.Type {
		case watch.Deleted:
			return false, errors.New("job was deleted before it finished")
		case watch.Added, watch.Modified:
			j, ok := ev.Object.(*batchv1.Job)
			if !ok {
				return false, nil
			}
			if j.UID != job.UID {
				return false, errors.New("job was replaced by another of the same name")
			}
			if st, _ := stateOf(j); st != jobRunning {
				final = j
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return final, nil
}

// interrupted deletes the Job and leaves the ConfigMap to the garbage
// collector: whoever pressed Ctrl-C wants out now, and the ownerReference
// already guarantees the rest.
func (r *Runner) interrupted(ctx context.Context, log *slog.Logger, job *batchv1.Job) error {
	log.Info("interrupted, deleting job")
	return errors.Join(ErrInterrupted, r.deleteJob(ctx, log, job))
}

// cleanup deletes the Job and waits until the ConfigMap is gone.
func (r *Runner) cleanup(ctx context.Context, log *slog.Logger, job *batchv1.Job, cm *corev1.ConfigMap) error {
	if err := r.deleteJob(ctx, log, job); err != nil {
		return err
	}
	r.atStep(StepJobDeleted)
	return r.waitConfigMapGone(ctx, log, cm)
}

// deleteJob deletes the Job in the background (its pods and the ConfigMap
// follow through the garbage collector). The UID precondition keeps it from
// deleting a Job that someone created under the same name since.
func (r *Runner) createJob(ctx context.Context, log *slog.Logger, job *batchv1.Job) (*batchv1.Job, error) {
	opCtx, cancel := r.op(ctx)
	defer cancel()
	created, err := r.Client.BatchV1().Jobs(job.Namespace).Create(opCtx, job, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil {
		log.Debug("create job", "error", err)
	}
	return created, err
}

// replaceLeftover deletes the Job of this name if it is what a crashed run
// left: labelled with RunLabel, never started, and older than the setup
// deadline, so that no live run can still start it. The cluster removes such
// a Job by itself at its deadline; this only spares the next run the wait
// when the Job controller is slow or down, and removes the suspended Jobs
// that versions before the setup deadline left. It reports whether the name
// is free again; when the Job is anything else, it returns the AlreadyExists
// error for the caller.
func (r *Runner) replaceLeftover(ctx context.Context, log *slog.Logger, namespace, name string) (bool, error) {
	jobs := r.Client.BatchV1().Jobs(namespace)
	opCtx, cancel := r.op(ctx)
	old, err := jobs.Get(opCtx, name, metav1.GetOptions{})
	cancel()
	if err != nil {
		return false, fmt.Errorf("job %q exists, and reading it: %w", name, err)
	}
	_, ours := old.Labels[RunLabel]
	_, notStarted := old.Annotations[StartSpecAnnotation]
	suspended := old.Spec.Suspend != nil && *old.Spec.Suspend && old.Status.StartTime == nil
	leftover := ours && (notStarted || suspended) && old.Status.Active == 0 &&
		time.Since(old.CreationTimestamp.Time) > r.SetupDeadline()
	if !leftover {
		return false, apierrors.NewAlreadyExists(batchv1.Resource("jobs"), name)
	}
	if err := r.deleteJob(ctx, log, old); err != nil {
		return false, err
	}
	r.step("job.batch/%s was left unstarted by an interrupted run (%s); replaced", name, old.Labels[RunLabel])
	// Background propagation removes the Job at once; wait for the name to
	// be free all the same, as a finalizer may hold it.
	deadline := time.Now().Add(r.requestTimeout())
	for {
		opCtx, cancel := r.op(ctx)
		_, err := jobs.Get(opCtx, name, metav1.GetOptions{})
		cancel()
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case time.Now().After(deadline):
			return false, fmt.Errorf("job %q still there after its deletion", name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *Runner) deleteJob(ctx context.Context, log *slog.Logger, job *batchv1.Job) error {
	opCtx, cancel := r.op(ctx)
	defer cancel()
	err := r.Client.BatchV1().Jobs(job.Namespace).Delete(opCtx, job.Name, metav1.DeleteOptions{
		PropagationPolicy: new(metav1.DeletePropagationBackground),
		Preconditions:     metav1.NewUIDPreconditions(string(job.UID)),
	})
	switch {
	case err == nil:
		r.step("job.batch/%s deleted", job.Name)
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone already (TTL controller, someone else) or replaced: either way
		// not ours to delete any more.
		log.Info("job already gone", "error", err)
		return nil
	default:
		return fmt.Errorf("delete job %q: %w", job.Name, err)
	}
}

// waitConfigMapGone waits for the garbage collector to delete the ConfigMap.
// If it does not within GCTimeout (no garbage collector running, or a backlog)
// the runner deletes the ConfigMap itself, so that a finished run never
// leaves it behind while this process lives. An interrupt cuts the wait
// short; the garbage collector still does the job.
func (r *Runner) waitConfigMapGone(ctx context.Context, log *slog.Logger, cm *corev1.ConfigMap) error {
	cms := r.Client.CoreV1().ConfigMaps(cm.Namespace)
	gone := func(ctx context.Context) (bool, error) {
		got, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			log.Debug("get configmap", "error", err)
			return false, nil
		}
		return got.UID != cm.UID, nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, r.gcTimeout())
	defer cancel()
	err := wait.PollUntilContextCancel(waitCtx, 200*time.Millisecond, true, gone)
	if err == nil {
		r.step("configmap/%s deleted", cm.Name)
		return nil
	}
	if ctx.Err() != nil {
		return ErrInterrupted
	}
	log.Warn("garbage collector did not delete the configmap in time, deleting it", "timeout", r.gcTimeout())
	opCtx, cancelOp := r.op(ctx)
	defer cancelOp()
	err = cms.Delete(opCtx, cm.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(cm.UID))})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete configmap %q: %w", cm.Name, err)
	}
	r.step("configmap/%s deleted", cm.Name)
	return nil
}
