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

{{/*
The labels of every resource: the recommended ones (app.kubernetes.io/*),
then commonLabels, which cannot override them (the selector depends on two).
*/}}
{{- define "sweep.labels" -}}
{{- $labels := dict
  "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-")
  "app.kubernetes.io/version" .Chart.AppVersion
  "app.kubernetes.io/managed-by" .Release.Service
  "app.kubernetes.io/part-of" "sweep" }}
{{- $labels = merge $labels (include "sweep.selectorLabels" . | fromYaml) }}
{{- $labels = merge $labels (default dict .Values.commonLabels) }}
{{- toYaml $labels }}
{{- end }}

{{/* The labels that select the daemon's pods; immutable in a DaemonSet. */}}
{{- define "sweep.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sweep.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The namespace of every namespaced object the chart creates (but the Role
and RoleBinding that read node Leases, which live in kube-node-lease):
namespaceOverride, else the release's.
*/}}
{{- define "sweep.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/*
The daemon's ServiceAccount: serviceAccount.name, else the full name when
the chart creates it, else the namespace's "default".
*/}}
{{- define "sweep.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sweep.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
An image reference from an image value (registry, repository, tag,
digest) and the default tag: digest if set, else tag, else the default. The
registry is global.imageRegistry, else the image's registry; when one is
set it replaces the repository's registry (its first path component when
that names a host: has a dot or a port, or is localhost, as Docker reads
references), else it is put in front. Called with a dict of root (the
chart's context), image and defaultTag.
*/}}
{{- define "sweep.imageRef" -}}
{{- $img := .image }}
{{- $repo := $img.repository }}
{{- with (default (default "" $img.registry) (default dict .root.Values.global).imageRegistry) }}
{{- $parts := splitn "/" 2 $repo }}
{{- if and $parts._1 (or (contains "." $parts._0) (contains ":" $parts._0) (eq $parts._0 "localhost")) }}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $parts._1 }}
{{- else }}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}
{{- end }}
{{- end }}
{{- if $img.digest }}
{{- printf "%s@%s" $repo $img.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .defaultTag $img.tag) }}
{{- end }}
{{- end }}

{{/* sweepd's image: the tag defaults to the chart's appVersion. */}}
{{- define "sweep.image" -}}
{{- include "sweep.imageRef" (dict "root" . "image" .Values.image "defaultTag" .Chart.AppVersion) }}
{{- end }}

{{/*
The pods' imagePullSecrets: imagePullSecrets, then global.imagePullSecrets
(names or {name: ...}), without duplicates; empty when there are none.
*/}}
{{- define "sweep.imagePullSecrets" -}}
{{- $secrets := list }}
{{- range concat (default list .Values.imagePullSecrets) (default list (default dict .Values.global).imagePullSecrets) }}
{{- $s := . }}
{{- if kindIs "string" . }}
{{- $s = dict "name" . }}
{{- end }}
{{- if not (has $s $secrets) }}
{{- $secrets = append $secrets $s }}
{{- end }}
{{- end }}
{{- with $secrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The hook Job's scheduling value named by .key: uninstall.<key> when set
(even to an empty list or map), else the daemon's <key>. Called with a dict
of Values and key; get yields nil for a null value and "" for a missing key.
*/}}
{{- define "sweep.uninstallScheduling" -}}
{{- $v := get .Values.uninstall .key }}
{{- if or (kindIs "invalid" $v) (kindIs "string" $v) }}
{{- $v = get .Values .key }}
{{- end }}
{{- with $v }}
{{- toYaml . }}
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
The host-local data directories that hostLocalRelease mounts, as a JSON
array: none unless it is enabled, and not those that cniDel already mounts
(the same path twice would be two volumes at one mount path), and never one
that cniDel mounts read-only.
*/}}
{{- define "sweep.hostLocalDirs" -}}
{{- $dirs := list }}
{{- if .Values.hostLocalRelease.enabled }}
{{- range .Values.hostLocalRelease.dataDirs }}
{{- if and $.Values.cniDel.enabled (has . $.Values.cniDel.readOnlyHostPaths) }}
{{- fail (printf "hostLocalRelease.dataDirs: %s is in cniDel.readOnlyHostPaths; releasing reservations needs it read-write" .) }}
{{- end }}
{{- if not (and $.Values.cniDel.enabled (has . $.Values.cniDel.hostPaths)) }}
{{- $dirs = append $dirs . }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $dirs }}
{{- end }}

{{/*
The host directories that the count of host-local's ranges reads and no
other value mounts already, as a JSON list: mounted read-only.
*/}}
{{- define "sweep.rangeDirs" -}}
{{- $dirs := list }}
{{- if .Values.hostLocalRanges.enabled }}
{{- $mounted := include "sweep.hostLocalDirs" . | fromJsonArray }}
{{- if .Values.cniDel.enabled }}
{{- $mounted = concat $mounted .Values.cniDel.hostPaths .Values.cniDel.readOnlyHostPaths }}
{{- end }}
{{- range prepend .Values.hostLocalRanges.dataDirs .Values.hostLocalRanges.confDir }}
{{- if not (or (has . $mounted) (has . $dirs)) }}
{{- $dirs = append $dirs . }}
{{- end }}
{{- end }}
{{- end }}
{{- toJson $dirs }}
{{- end }}

{{/*
Volume name of a host directory for CNI DEL, distinct from the uninstall
ones: the same host path may be mounted by both.
*/}}
{{- define "sweep.cniHostPathVolume" -}}
{{- printf "cni-%s" (sha256sum . | trunc 10) }}
{{- end }}

{{/*
An alert's for and labels: its own for, else prometheusRule.for; its
severity, then alertLabels. Called with a dict of r (prometheusRule) and a
(the alert's values).
*/}}
{{- define "sweep.alertCommon" -}}
for: {{ default .r.for .a.for }}
labels:
  severity: {{ .a.severity }}
  {{- with .r.alertLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/*
sweep.durationSeconds: a Go duration string ("1h30m", "90s") in seconds.
*/}}
{{- define "sweep.durationSeconds" -}}
{{- $units := dict "ns" 1e-9 "us" 1e-6 "µs" 1e-6 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9.]+(ns|us|µs|ms|s|m|h)" . -1 -}}
{{- $total = addf $total (mulf (regexFind "^[0-9.]+" . | float64) (get $units (regexReplaceAll "^[0-9.]+" . ""))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
sweep.checkIntervals refuses a minAge or an @every schedule under one minute,
as sweepd does, unless daemon.allowShortIntervals: a minimum age under it no
longer covers a slow CNI ADD, and "@every 0s" prunes every second.
*/}}
{{- define "sweep.checkIntervals" -}}
{{- $d := .Values.daemon -}}
{{- if not $d.allowShortIntervals -}}
{{- if lt (include "sweep.durationSeconds" $d.minAge | float64) 60.0 -}}
{{- fail (printf "daemon.minAge %s is under the floor of 1m: a CNI ADD may still be running on files that young (daemon.allowShortIntervals is for tests and demos)" $d.minAge) -}}
{{- end -}}
{{- if hasPrefix "@every" $d.schedule -}}
{{- $every := trimPrefix "@every" $d.schedule | trim -}}
{{- if or (hasPrefix "-" $every) (lt (include "sweep.durationSeconds" $every | float64) 60.0) -}}
{{- fail (printf "daemon.schedule %q runs more often than once a minute (daemon.allowShortIntervals is for tests and demos)" $d.schedule) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The kube-rbac-proxy container (kubeRBACProxy.enabled): it serves
metrics.port over HTTPS and passes a request on to sweepd at
127.0.0.1:kubeRBACProxy.port only when the bearer token (TokenReview) or
client certificate (tls.caItem) it comes with may get the path
(SubjectAccessReview of a non-resource URL: get /metrics), but /healthz and
/readyz, which the kubelet probes without a token.
*/}}
{{- define "sweep.kubeRBACProxyContainer" -}}
{{- $p := .Values.kubeRBACProxy }}
- name: kube-rbac-proxy
  image: {{ include "sweep.imageRef" (dict "root" . "image" $p.image "defaultTag" "") | quote }}
  imagePullPolicy: {{ $p.image.pullPolicy }}
  terminationMessagePolicy: FallbackToLogsOnError
  args:
    - --secure-listen-address=:{{ .Values.metrics.port }}
    - --upstream=http://127.0.0.1:{{ $p.port }}/
    - --ignore-paths=/healthz,/readyz
    {{- with $p.tls.secretName }}
    - --tls-cert-file=/etc/kube-rbac-proxy/tls/{{ $p.tls.certItem }}
    - --tls-private-key-file=/etc/kube-rbac-proxy/tls/{{ $p.tls.keyItem }}
    {{- with $p.tls.caItem }}
    - --client-ca-file=/etc/kube-rbac-proxy/tls/{{ . }}
    {{- end }}
    {{- end }}
    {{- range $p.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  ports:
    - name: metrics
      containerPort: {{ .Values.metrics.port }}
      protocol: TCP
  {{- with $p.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $p.containerSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if or (eq .Values.daemon.liveness "cri") $p.tls.secretName }}
  volumeMounts:
    {{- if eq .Values.daemon.liveness "cri" }}
    - name: kube-rbac-proxy-token
      mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      readOnly: true
    {{- end }}
    {{- if $p.tls.secretName }}
    - name: kube-rbac-proxy-tls
      mountPath: /etc/kube-rbac-proxy/tls
      readOnly: true
    {{- end }}
  {{- end }}
{{- end }}

{{/*
The scrape endpoint's settings from the monitor's values (.m:
metrics.serviceMonitor or metrics.podMonitor). With kubeRBACProxy.enabled:
HTTPS, tlsConfig (by default no check of the proxy's self-signed
certificate), and authorization, else for a ServiceMonitor (.service)
Prometheus's own ServiceAccount token. Then the relabelings, after the one
that names the node, and the metric relabelings.
*/}}
{{- define "sweep.monitorEndpoint" -}}
{{- $m := .m }}
{{- if .root.Values.kubeRBACProxy.enabled }}
scheme: https
tlsConfig:
  {{- toYaml (default (dict "insecureSkipVerify" true) $m.tlsConfig) | nindent 2 }}
{{- if $m.authorization }}
authorization:
  {{- toYaml $m.authorization | nindent 2 }}
{{- else if .service }}
bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
{{- else }}
{{- fail "metrics.podMonitor with kubeRBACProxy.enabled needs metrics.podMonitor.authorization: a PodMonitor cannot send Prometheus's own token, only a Secret's (credentials: {name, key})" }}
{{- end }}
{{- end }}
{{- with $m.interval }}
interval: {{ . }}
{{- end }}
{{- with $m.scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
relabelings:
  # The node the pod runs on, for alerts that say which node.
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
  {{- with $m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
sweep.checkUninstallResources fails the render on an uninstall.resources
entry that could widen a deletion, as sweepd's parser refuses it, so that
helm install --skip-schema-validation cannot pass one on either: a name,
namespace or labelSelector that is there and empty (a value left unset),
and an entry that says neither which object (name), nor which objects
(labelSelector), nor all: true.
*/}}
{{- define "sweep.checkUninstallResources" -}}
{{- range $i, $e := .Values.uninstall.resources }}
{{- range $k := list "name" "namespace" "labelSelector" }}
{{- if and (hasKey $e $k) (not (trim (toString (index $e $k) | replace "<nil>" ""))) }}
{{- fail (printf "uninstall.resources[%d].%s is empty: give a value or remove the key (an empty %s would widen the deletion)" $i $k $k) }}
{{- end }}
{{- end }}
{{- $all := eq (toString $e.all) "true" }}
{{- if or (and $e.name (or $e.labelSelector $all)) (and $e.labelSelector $all) }}
{{- fail (printf "uninstall.resources[%d]: name, labelSelector and all: true exclude each other" $i) }}
{{- end }}
{{- if not (or $e.name $e.labelSelector $all) }}
{{- fail (printf "uninstall.resources[%d] names no object: give name, labelSelector, or all: true to delete every object of %s" $i (toString $e.resource)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The capabilities the daemon's container adds, as a JSON array: those of
securityContext, cniDel.capabilities with cniDel, and SYS_CHROOT with
cniDel.chroot. The container and the SCC both take them from here.
*/}}
{{- define "sweep.addedCapabilities" -}}
{{- $add := default list (default dict .Values.securityContext.capabilities).add }}
{{- if .Values.cniDel.enabled }}
{{- $add = concat $add .Values.cniDel.capabilities }}
{{- if .Values.cniDel.chroot }}
{{- $add = append $add "SYS_CHROOT" }}
{{- end }}
{{- end }}
{{- toJson ($add | uniq) }}
{{- end }}
