{{/* Names, labels and shared pieces of the kshard chart. */}}

{{- define "kshard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* fullname: the release name, with the chart name added unless it is already in it. */}}
{{- define "kshard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kshard.coordinator.fullname" -}}
{{- printf "%s-coordinator" (include "kshard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kshard.shard.fullname" -}}
{{- printf "%s-shard" (include "kshard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kshard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The recommended app.kubernetes.io labels; kshard.labels takes (dict "ctx" $ "component" "shard"). */}}
{{- define "kshard.labels" -}}
helm.sh/chart: {{ include "kshard.chart" .ctx }}
{{ include "kshard.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: kshard
{{- end }}

{{- define "kshard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kshard.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- if .component }}
app.kubernetes.io/component: {{ .component }}
{{- end }}
{{- end }}

{{- define "kshard.coordinator.serviceAccountName" -}}
{{- if .Values.serviceAccount.coordinator.create }}
{{- default (include "kshard.coordinator.fullname" .) .Values.serviceAccount.coordinator.name }}
{{- else }}
{{- required "serviceAccount.coordinator.name is required when serviceAccount.coordinator.create is false" .Values.serviceAccount.coordinator.name }}
{{- end }}
{{- end }}

{{- define "kshard.shard.serviceAccountName" -}}
{{- if .Values.serviceAccount.shard.create }}
{{- default (include "kshard.shard.fullname" .) .Values.serviceAccount.shard.name }}
{{- else }}
{{- required "serviceAccount.shard.name is required when serviceAccount.shard.create is false" .Values.serviceAccount.shard.name }}
{{- end }}
{{- end }}

{{- define "kshard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The coordinator's gRPC Service: every Ready replica, the leader and its standby (which
names the leader). Its name is the one in the serving certificate, which shards verify. */}}
{{- define "kshard.coordinator.serviceHost" -}}
{{- printf "%s.%s.svc" (include "kshard.coordinator.fullname" .) .Release.Namespace }}
{{- end }}

{{/* The headless Service of every coordinator replica, Ready or not: shards dial its name,
which resolves to each replica's pod IP. */}}
{{- define "kshard.coordinator.peersName" -}}
{{- printf "%s-peers" (include "kshard.coordinator.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{- define "kshard.coordinator.peersHost" -}}
{{- printf "%s.%s.svc" (include "kshard.coordinator.peersName" .) .Release.Namespace }}
{{- end }}

{{/* TLS Secret names: the chart's own, or the existing ones named in values. */}}
{{- define "kshard.coordinator.tlsSecret" -}}
{{- if eq .Values.tls.certificates "existingSecrets" }}
{{- required "tls.existingSecrets.coordinator is required when tls.certificates is existingSecrets" .Values.tls.existingSecrets.coordinator }}
{{- else }}
{{- printf "%s-tls" (include "kshard.coordinator.fullname" .) }}
{{- end }}
{{- end }}

{{- define "kshard.shard.tlsSecret" -}}
{{- if eq .Values.tls.certificates "existingSecrets" }}
{{- required "tls.existingSecrets.shard is required when tls.certificates is existingSecrets" .Values.tls.existingSecrets.shard }}
{{- else }}
{{- printf "%s-tls" (include "kshard.shard.fullname" .) }}
{{- end }}
{{- end }}

{{/*
kshard.enabledControllers: the names of the controllers .Values.controllers enables, one per
line, with the shard's --controllers rules: a controller is named by its key in
files/permissions.yaml (kube-controller-manager's alias for it) or by its canonical name, as
kube-controller-manager's --controllers takes either; its first entry ("name" or "-name")
wins, else "*" enables the controllers on by default. Unknown names fail the render, as they
fail the shard.
*/}}
{{- define "kshard.enabledControllers" -}}
{{- $table := .Files.Get "files/permissions.yaml" | fromYaml }}
{{- $known := keys $table.controllers | sortAlpha }}
{{- $names := list }}
{{- $display := list }}
{{- range $known }}
{{- $canonical := (index $table.controllers .).canonical }}
{{- $names = append $names . }}
{{- if $canonical }}
{{- $names = append $names $canonical }}
{{- $display = append $display (printf "%s (alias %s)" $canonical .) }}
{{- else }}
{{- $display = append $display . }}
{{- end }}
{{- end }}
{{- $sel := .Values.controllers }}
{{- range $sel }}
{{- if and (ne . "*") (not (has (trimPrefix "-" .) $names)) }}
{{- fail (printf "controllers: unknown controller %q; known, by kube-controller-manager's canonical name or alias: %s (use \"*\" for all on by default, \"-name\" to disable one)" . (join ", " (sortAlpha $display))) }}
{{- end }}
{{- end }}
{{- range $known }}
{{- $entry := index $table.controllers . }}
{{- $own := list . }}
{{- if $entry.canonical }}
{{- $own = append $own $entry.canonical }}
{{- end }}
{{- $decided := "" }}
{{- $star := false }}
{{- range $sel }}
{{- if not $decided }}
{{- if eq . "*" }}
{{- $star = true }}
{{- else if has . $own }}
{{- $decided = "on" }}
{{- else if and (hasPrefix "-" .) (has (trimPrefix "-" .) $own) }}
{{- $decided = "off" }}
{{- end }}
{{- end }}
{{- end }}
{{- if or (eq $decided "on") (and (not $decided) $star $entry.onByDefault) }}
{{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* kshard.shardRules: the shard ClusterRole's rules: the base, then each enabled controller's. */}}
{{- define "kshard.shardRules" -}}
{{- $table := .Files.Get "files/permissions.yaml" | fromYaml }}
{{- $rules := $table.base }}
{{- range (include "kshard.enabledControllers" . | trim | splitList "\n") }}
{{- if . }}
{{- $rules = concat $rules (index $table.controllers .).rules }}
{{- end }}
{{- end }}
{{- toYaml $rules }}
{{- end }}

{{- define "kshard.podEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}

{{/* kshard.topologySpread takes (dict "values" .Values.shard "labels" (selector labels)). */}}
{{- define "kshard.topologySpread" -}}
{{- if .values.topologySpreadConstraints }}
{{- toYaml .values.topologySpreadConstraints }}
{{- else }}
{{- range .values.topologySpreadKeys }}
- maxSkew: 1
  topologyKey: {{ . }}
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- $.labels | nindent 6 }}
{{- end }}
{{- end }}
{{- end }}

{{/* The server-side fence's ValidatingAdmissionPolicy and binding: cluster-scoped, so named
with the release namespace like the shard ClusterRole. */}}
{{- define "kshard.shardFence.name" -}}
{{- printf "%s-fence-%s" (include "kshard.shard.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
kshard.clusterPartition: the partition whose owner works cluster-scoped objects, the one
the empty namespace name hashes to: xxhash64("") mod .Values.partitions, as the
coordinator computes it (partition.Map.For(partition.ClusterKey)). xxhash64("") is
0xEF46DB3751D8E999, above int64, so it is split into its high and low 32 bits,
4014398263 * 2^32 + 1373170073, and reduced piecewise: every product stays below 2^32
for a count of at most 65536. The fence policy lets only this partition's owner update
or delete cluster-scoped objects.
*/}}
{{- define "kshard.clusterPartition" -}}
{{- $n := int64 .Values.partitions }}
{{- mod (add (mul (mod 4014398263 $n) (mod 4294967296 $n)) (mod 1373170073 $n)) $n }}
{{- end }}


{{/*
kshard.rootCA.source: where the root-ca-cert-publisher's bundle comes from: "pem" (a
ConfigMap the chart makes), "configMap", "secret", or "" (no --root-ca-file: the shards'
ServiceAccount CA). More than one set, or a pem without a certificate, fails the render.
*/}}
{{- define "kshard.rootCA.source" -}}
{{- $r := .Values.rootCA }}
{{- $set := list }}
{{- if $r.pem }}{{ $set = append $set "pem" }}{{ end }}
{{- if $r.existingConfigMap }}{{ $set = append $set "configMap" }}{{ end }}
{{- if $r.existingSecret }}{{ $set = append $set "secret" }}{{ end }}
{{- if gt (len $set) 1 }}
{{- fail "rootCA: set at most one of pem, existingConfigMap and existingSecret" }}
{{- end }}
{{- if and $r.pem (not (contains "-----BEGIN CERTIFICATE-----" $r.pem)) }}
{{- fail "rootCA.pem: not a PEM certificate bundle (no -----BEGIN CERTIFICATE----- line)" }}
{{- end }}
{{- if $set }}{{ first $set }}{{ end }}
{{- end }}

{{- define "kshard.rootCA.configMapName" -}}
{{- printf "%s-root-ca" (include "kshard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* kshard.shardReplicas: the shard replicas of every shard Deployment, the default
group's and each of shardGroups' (an entry without replicas takes shard.replicas). */}}
{{- define "kshard.shardReplicas" -}}
{{- $n := .Values.shard.replicas | int }}
{{- range .Values.shardGroups }}
{{- $n = add $n (hasKey . "replicas" | ternary .replicas $.Values.shard.replicas) }}
{{- end }}
{{- $n }}
{{- end }}
