package transient

import (
	"fmt"
	"maps"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RunLabel marks the Job and the ConfigMap of one run with the run's id, so
// that the plugin's Jobs, and what a crashed run left, can be found.
const RunLabel = "transient.sweep-k8s.io/run"

// instantiateAnnotation is what `kubectl create job --from=cronjob/…` sets on
// a manually started Job; tools that tell manual runs from scheduled ones read
// it.
const instantiateAnnotation = "cronjob.kubernetes.io/instantiate"

// ParseJobFrom parses --job-from. Only CronJobs can be instantiated, as with
// `kubectl create job --from`; "cronjob", "cronjobs", "cj" and the
// group-qualified spellings are accepted.
func ParseJobFrom(s string) (name string, err error) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("invalid --job-from %q: want cronjob/NAME", s)
	}
	switch strings.ToLower(kind) {
	case "cronjob", "cronjobs", "cj", "cronjob.batch", "cronjobs.batch":
		return name, nil
	default:
		return "", fmt.Errorf("invalid --job-from %q: only cronjob/NAME is supported", s)
	}
}

// JobFromCronJob is the Job that `kubectl create job NAME --from=cronjob/…`
// makes: the CronJob's job template, annotated as a manual run (an annotation
// of the template's own of that name wins, as in kubectl) and controlled by
// the CronJob.
//
// The owner stays the CronJob, as with kubectl, although the ConfigMap hangs
// off the Job: deleting the CronJob then also ends a manual run and so its
// ConfigMap, and the CronJob controller ignores Jobs missing from its active
// list, so the manual run neither counts against concurrencyPolicy nor is
// adopted as a scheduled one.
//
// The owner reference has no blockOwnerDeletion, as in kubectl (which does not
// use metav1.NewControllerRef for that reason): setting it needs update on
// cronjobs/finalizers where OwnerReferencesPermissionEnforcement is enabled
// (OpenShift, many hardened clusters), a right that people who may run a
// CronJob by hand rarely have.
func JobFromCronJob(cj *batchv1.CronJob, name string) *batchv1.Job {
	tmpl := cj.Spec.JobTemplate
	ann := map[string]string{instantiateAnnotation: "manual"}
	maps.Copy(ann, tmpl.Annotations)
	return &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   cj.Namespace,
			Labels:      maps.Clone(tmpl.Labels),
			Annotations: ann,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: batchv1.SchemeGroupVersion.String(),
				Kind:       "CronJob",
				Name:       cj.Name,
				UID:        cj.UID,
				Controller: new(true),
			}},
		},
		Spec: *tmpl.Spec.DeepCopy(),
	}
}

// JobFromImage is the Job that `kubectl create job NAME --image=IMAGE --
// COMMAND…` makes, plus the ConfigMap's keys as the container's environment:
// without a reference the ConfigMap would be of no use to the Job.
func JobFromImage(namespace, name, image string, command []string, configMap string) *batchv1.Job {
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:    name,
						Image:   image,
						Command: command,
						EnvFrom: []corev1.EnvFromSource{{
							ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}},
						}},
					}},
					RestartPolicy: corev1.RestartPolicyNever,
				},
			},
		},
	}
}

// RenameConfigMap points every reference to the ConfigMap from in the pod
// spec at to: volumes, projected volumes, env and envFrom of init and regular
// containers. It returns how many references it changed.
func RenameConfigMap(spec *corev1.PodSpec, from, to string) int {
	n := 0
	rename := func(name *string) {
		if *name == from {
			*name = to
			n++
		}
	}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.ConfigMap != nil {
			rename(&v.ConfigMap.Name)
		}
		if v.Projected != nil {
			for j := range v.Projected.Sources {
				if cm := v.Projected.Sources[j].ConfigMap; cm != nil {
					rename(&cm.Name)
				}
			}
		}
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			c := &cs[i]
			for j := range c.Env {
				if vf := c.Env[j].ValueFrom; vf != nil && vf.ConfigMapKeyRef != nil {
					rename(&vf.ConfigMapKeyRef.Name)
				}
			}
			for j := range c.EnvFrom {
				if ref := c.EnvFrom[j].ConfigMapRef; ref != nil {
					rename(&ref.Name)
				}
			}
		}
	}
	return n
}

// jobState is where a Job stands, from its conditions.
type jobState int

const (
	jobRunning jobState = iota
	jobComplete
	jobFailed
)

// stateOf reads the terminal conditions only: SuccessCriteriaMet and
// FailureTarget come earlier, while pods may still be terminating, and the
// run must not be cleaned up under them.
func stateOf(job *batchv1.Job) (jobState, *batchv1.JobCondition) {
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return jobComplete, c
		case batchv1.JobFailed:
			return jobFailed, c
		}
	}
	return jobRunning, nil
}
