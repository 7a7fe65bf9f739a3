package transient

import (
	"reflect"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseJobFrom(t *testing.T) {
	tests := []struct {
		in, name string
		wantErr  bool
	}{
		{in: "cronjob/nightly", name: "nightly"},
		{in: "cronjobs/nightly", name: "nightly"},
		{in: "cj/nightly", name: "nightly"},
		{in: "CronJob.batch/nightly", name: "nightly"},
		{in: "nightly", wantErr: true},
		{in: "job/nightly", wantErr: true},
		{in: "cronjob/", wantErr: true},
		{in: "cronjob/a/b", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			name, err := ParseJobFrom(tt.in)
			if (err != nil) != tt.wantErr || name != tt.name {
				t.Fatalf("ParseJobFrom(%q) = %q, %v; want %q, error %v", tt.in, name, err, tt.name, tt.wantErr)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	valid := Options{Namespace: "ns", ConfigMapName: "cm", JobName: "job", CronJob: "cj", TTLAfterFinished: time.Minute}
	tests := []struct {
		name    string
		mod     func(*Options)
		wantErr string
	}{
		{name: "valid from cronjob", mod: func(*Options) {}},
		{name: "valid from image with command", mod: func(o *Options) { o.CronJob, o.Image, o.Command = "", "busybox", []string{"true"} }},
		{name: "no job name", mod: func(o *Options) { o.JobName = "" }, wantErr: "job name is required"},
		{name: "bad job name", mod: func(o *Options) { o.JobName = "Job_1" }, wantErr: "invalid job name"},
		{name: "bad configmap name", mod: func(o *Options) { o.ConfigMapName = "a b" }, wantErr: "invalid configmap name"},
		{name: "neither source", mod: func(o *Options) { o.CronJob = "" }, wantErr: "one of --job-from and --job-image"},
		{name: "both sources", mod: func(o *Options) { o.Image = "x" }, wantErr: "mutually exclusive"},
		{name: "command with cronjob", mod: func(o *Options) { o.Command = []string{"x"} }, wantErr: "needs --job-image"},
		{name: "negative timeout", mod: func(o *Options) { o.Timeout = -time.Second }, wantErr: "--timeout"},
		{name: "negative ttl", mod: func(o *Options) { o.TTLAfterFinished = -time.Second }, wantErr: "--ttl-after-finished"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid
			tt.mod(&o)
			err := o.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestJobFromCronJob(t *testing.T) {
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: "ns", UID: "cj-uid", Labels: map[string]string{"cj-only": "x"}},
		Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"team": "a"}, Annotations: map[string]string{"note": "n"}},
			Spec: batchv1.JobSpec{
				BackoffLimit: new(int32(0)),
				Template:     corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}}},
			},
		}},
	}
	job := JobFromCronJob(cj, "manual")
	if job.Name != "manual" || job.Namespace != "ns" {
		t.Errorf("name %s/%s", job.Namespace, job.Name)
	}
	if job.Labels["team"] != "a" || job.Labels["cj-only"] != "" {
		t.Errorf("labels %v: want the template's, not the CronJob's", job.Labels)
	}
	if job.Annotations[instantiateAnnotation] != "manual" || job.Annotations["note"] != "n" {
		t.Errorf("annotations %v", job.Annotations)
	}
	// Exactly kubectl's reference: no blockOwnerDeletion, which would need
	// update on cronjobs/finalizers under OwnerReferencesPermissionEnforcement.
	wantRef := metav1.OwnerReference{APIVersion: "batch/v1", Kind: "CronJob", Name: "nightly", UID: "cj-uid", Controller: new(true)}
	if len(job.OwnerReferences) != 1 || !reflect.DeepEqual(job.OwnerReferences[0], wantRef) {
		t.Errorf("owner references %+v, want [%+v]", job.OwnerReferences, wantRef)
	}
	// As in kubectl, the template's own instantiate annotation wins.
	cj.Spec.JobTemplate.Annotations[instantiateAnnotation] = "by-template"
	if got := JobFromCronJob(cj, "manual").Annotations[instantiateAnnotation]; got != "by-template" {
		t.Errorf("instantiate annotation %q, want the template's", got)
	}
	delete(cj.Spec.JobTemplate.Annotations, instantiateAnnotation)
	// The copy must not alias the CronJob's template.
	job.Labels["team"] = "b"
	job.Annotations["note"] = "m"
	job.Spec.Template.Spec.Containers[0].Image = "other"
	if cj.Spec.JobTemplate.Labels["team"] != "a" || cj.Spec.JobTemplate.Annotations["note"] != "n" || cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Image != "img" {
		t.Error("JobFromCronJob aliases the CronJob's template")
	}
}

func TestRenameConfigMap(t *testing.T) {
	ref := func(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }
	spec := corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "v1", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("cm")}}},
			{Name: "v2", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: ref("other")}}},
			{Name: "v3", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref("cm")}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: ref("cm")}},
			}}}},
			{Name: "v4", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "cm"}}},
		},
		InitContainers: []corev1.Container{{
			Name:    "init",
			EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: ref("cm")}}},
		}},
		Containers: []corev1.Container{{
			Name: "main",
			Env: []corev1.EnvVar{
				{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: ref("cm"), Key: "a", Optional: new(true)}}},
				{Name: "B", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: ref("cm"), Key: "b"}}},
				{Name: "C", Value: "cm"},
			},
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: ref("cm")}}},
		}},
	}
	if n := RenameConfigMap(&spec, "cm", "cm-x1"); n != 4 {
		t.Errorf("renamed %d references, want 4", n)
	}
	if got := spec.Volumes[0].ConfigMap.Name; got != "cm-x1" {
		t.Errorf("volume: %s", got)
	}
	if got := spec.Volumes[1].ConfigMap.Name; got != "other" {
		t.Errorf("other volume renamed to %s", got)
	}
	if got := spec.Volumes[2].Projected.Sources[0].ConfigMap.Name; got != "cm-x1" {
		t.Errorf("projected: %s", got)
	}
	if spec.Volumes[2].Projected.Sources[1].Secret.Name != "cm" || spec.Volumes[3].Secret.SecretName != "cm" ||
		spec.Containers[0].Env[1].ValueFrom.SecretKeyRef.Name != "cm" || spec.Containers[0].EnvFrom[0].SecretRef.Name != "cm" ||
		spec.Containers[0].Env[2].Value != "cm" {
		t.Error("a Secret or a literal of the same name was renamed")
	}
	if got := spec.InitContainers[0].EnvFrom[0].ConfigMapRef.Name; got != "cm-x1" {
		t.Errorf("init envFrom: %s", got)
	}
	if got := spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name; got != "cm-x1" {
		t.Errorf("configMapKeyRef: %s", got)
	}
	if n := RenameConfigMap(&spec, "absent", "x"); n != 0 {
		t.Errorf("renamed %d references to an unreferenced name", n)
	}
}

func TestStateOf(t *testing.T) {
	cond := func(typ batchv1.JobConditionType, s corev1.ConditionStatus) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: s, Reason: string(typ)}
	}
	tests := []struct {
		name  string
		conds []batchv1.JobCondition
		want  jobState
	}{
		{name: "none", want: jobRunning},
		{name: "suspended", conds: []batchv1.JobCondition{cond(batchv1.JobSuspended, corev1.ConditionTrue)}, want: jobRunning},
		// Pods may still run under these: not final yet.
		{name: "success criteria met", conds: []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue)}, want: jobRunning},
		{name: "failure target", conds: []batchv1.JobCondition{cond(batchv1.JobFailureTarget, corev1.ConditionTrue)}, want: jobRunning},
		{name: "complete", conds: []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, corev1.ConditionTrue), cond(batchv1.JobComplete, corev1.ConditionTrue)}, want: jobComplete},
		{name: "failed", conds: []batchv1.JobCondition{cond(batchv1.JobFailed, corev1.ConditionTrue)}, want: jobFailed},
		{name: "complete false", conds: []batchv1.JobCondition{cond(batchv1.JobComplete, corev1.ConditionFalse)}, want: jobRunning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, c := stateOf(&batchv1.Job{Status: batchv1.JobStatus{Conditions: tt.conds}})
			if got != tt.want {
				t.Fatalf("state %v, want %v", got, tt.want)
			}
			if (c != nil) != (got != jobRunning) {
				t.Fatalf("condition %v for state %v", c, got)
			}
		})
	}
}
