{{/*
The prefix of every object's name: the release name when it already says "raylab"
(`helm install raylab ...` gives raylab-user, raylab-culler, as the docs name them),
else "<release>-raylab". Cluster-scoped objects carry it too, so two releases never
share a ClusterRole.
*/}}
{{- define "raylab.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else if contains "raylab" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-raylab" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object: who made it and for which release. */}}
{{- define "raylab.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: raylab
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: raylab
{{- end -}}

{{/* What selects the pods of one component of this release (never changes on upgrade). */}}
{{- define "raylab.selector" -}}
app.kubernetes.io/name: raylab
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The culler's image: its tag defaults to the chart's appVersion. */}}
{{- define "raylab.cullerImage" -}}
{{- $image := .Values.culler.image -}}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- end -}}

{{/* A GPU type by name, or a failure that names the value that asked for it. */}}
{{- define "raylab.gpuType" -}}
{{- $profile := index .root.Values.gpuTypes .name -}}
{{- if not $profile -}}
{{- fail (printf "%s names GPU type %q, which gpuTypes does not define (defined: %s)" .from .name (keys .root.Values.gpuTypes | sortAlpha | join ", ")) -}}
{{- end -}}
{{- toJson $profile -}}
{{- end -}}

{{/*
The c.Raylab settings as the single-user servers, the magics and the culler read them:
settings as given, gpuTypes as gpu_types, and what the chart's other parts imply
(Kueue's queue and priority classes, the culler among the clusters' NetworkPolicy
peers) unless settings already says otherwise.
*/}}
{{- define "raylab.settings" -}}
{{- $raylab := deepCopy .Values.settings -}}
{{- if .Values.gpuTypes -}}
{{- $_ := set $raylab "gpu_types" .Values.gpuTypes -}}
{{- end -}}
{{- if .Values.kueue.enabled -}}
{{- if not (hasKey $raylab "local_queue") -}}
{{- $_ := set $raylab "local_queue" .Values.kueue.localQueue -}}
{{- end -}}
{{- if not (hasKey $raylab "priority_classes") -}}
{{- $names := list -}}
{{- range .Values.kueue.priorityClasses -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- $_ := set $raylab "priority_classes" $names -}}
{{- end -}}
{{- end -}}
{{- $policies := true -}}
{{- if hasKey $raylab "network_policy" -}}
{{- $policies = $raylab.network_policy -}}
{{- end -}}
{{- if and .Values.culler.enabled $policies -}}
{{- /* The culler reads each head's dashboard and metrics: its pods join the peers. */ -}}
{{- $culler := dict "podSelector" (dict "matchLabels" (include "raylab.selector" (dict "root" . "component" "culler") | fromYaml)) "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" .Release.Namespace)) -}}
{{- $_ := set $raylab "network_policy_peers" (append (default (list) $raylab.network_policy_peers) $culler) -}}
{{- end -}}
{{- dict "Raylab" $raylab | toPrettyJson -}}
{{- end -}}

{{/* What every pre-puller container shares: tiny requests, no privileges. */}}
{{- define "raylab.prepullerContainer" -}}
resources:
  {{- toYaml .resources | nindent 2 }}
securityContext:
  allowPrivilegeEscalation: false
  capabilities:
    drop: ["ALL"]
{{- end -}}
