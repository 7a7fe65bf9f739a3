{{/* The chart's name, at most 63 characters (a label value). */}}
{{- define "sweep.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of every resource. 52 characters at most, so that suffixes such
as -uninstall stay within the 63 of a label value.
*/}}
{{- define "sweep.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The recommended labels (app.kubernetes.io/*) of every resource. */}}
{{- define "sweep.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sweep.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sweep
{{- end }}

{{/* The labels that select the daemon's pods; immutable in a DaemonSet. */}}
{{- define "sweep.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sweep.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The image reference: digest if set, else tag, else the appVersion. */}}
{{- define "sweep.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The name of the ConfigMap the hook hands to the daemons (contract with sweepd uninstall). */}}
{{- define "sweep.cleanupConfigMap" -}}
{{- include "sweep.fullname" . }}-cleanup
{{- end }}

{{/* The name of the hook's objects. */}}
{{- define "sweep.uninstallName" -}}
{{- include "sweep.fullname" . }}-uninstall
{{- end }}

{{/* The volume name of a host path mounted for the uninstall's file cleanup. */}}
{{- define "sweep.hostPathVolume" -}}
{{- printf "host-%s" (sha256sum . | trunc 10) }}
{{- end }}

{{/*
Volume name of a host directory for CNI DEL, distinct from the uninstall
ones: the same host path may be mounted by both.
*/}}
{{- define "sweep.cniHostPathVolume" -}}
{{- printf "cni-%s" (sha256sum . | trunc 10) }}
{{- end }}
