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

{{/* raylab's built-in GPU types (raylab/profiles.py's DEFAULT_PROFILES). */}}
{{- define "raylab.builtinGpuTypes" -}}
a100:
  description: NVIDIA A100 80GB
  resource_key: nvidia.com/gpu
  node_selector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  max_gpus_per_worker: 8
  default_cpus: "12"
  default_memory: 96Gi
h100:
  description: NVIDIA H100 80GB
  resource_key: nvidia.com/gpu
  node_selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  max_gpus_per_worker: 8
  default_cpus: "16"
  default_memory: 160Gi
l4:
  description: NVIDIA L4 24GB
  resource_key: nvidia.com/gpu
  node_selector: {nvidia.com/gpu.product: NVIDIA-L4}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  max_gpus_per_worker: 4
  default_cpus: "8"
  default_memory: 32Gi
cpu:
  description: CPU only
  max_gpus_per_worker: 0
  default_cpus: "4"
  default_memory: 16Gi
{{- end -}}

{{/*
The GPU types in force, as JSON: gpuTypes, or the built-in ones. A map of the admin's
replaces the built-in one whole (values files would merge maps key by key).
*/}}
{{- define "raylab.gpuTypes" -}}
{{- if .Values.gpuTypes -}}
{{- toJson .Values.gpuTypes -}}
{{- else -}}
{{- include "raylab.builtinGpuTypes" . | fromYaml | toJson -}}
{{- end -}}
{{- end -}}

{{/* A GPU type by name, or a failure that names the value that asked for it. */}}
{{- define "raylab.gpuType" -}}
{{- $types := include "raylab.gpuTypes" .root | fromJson -}}
{{- $profile := index $types .name -}}
{{- if not $profile -}}
{{- fail (printf "%s names GPU type %q, which gpuTypes does not define (defined: %s)" .from .name (keys $types | sortAlpha | join ", ")) -}}
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
{{- /* Written even when built in: the culler then knows them whatever its image. */ -}}
{{- $_ := set $raylab "gpu_types" (include "raylab.gpuTypes" . | fromJson) -}}
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
{{- $out := dict "Raylab" $raylab -}}
{{- if .Values.onboarding.enabled -}}
{{- $_ := set $out "RaylabOnboarding" (include "raylab.onboardingSettings" . | fromJson) -}}
{{- end -}}
{{- $out | toPrettyJson -}}
{{- end -}}

{{/*
c.RaylabOnboarding, read by raylab.onboarding.pre_spawn_hook in the hub: what each
user gets at spawn (the ClusterRole bound, the quota, the ClusterQueue of the LocalQueues,
the settings ConfigMap a pod in the user's namespace gets a copy of).
*/}}
{{- define "raylab.onboardingSettings" -}}
{{- $o := .Values.onboarding -}}
{{- $out := dict "service_account" $o.serviceAccount "cluster_role" (printf "%s-user" (include "raylab.fullname" .)) "resource_quota" $o.resourceQuota.enabled "namespace_labels" $o.namespaceLabels -}}
{{- /* This ConfigMap, copied into a user's pod's namespace when not this one. */ -}}
{{- $_ := set $out "config_map" (printf "%s-config" (include "raylab.fullname" .)) -}}
{{- $_ := set $out "config_map_namespace" .Release.Namespace -}}
{{- $hard := dict -}}
{{- range $key, $value := $o.resourceQuota.hard -}}
{{- $_ := set $hard $key (toString $value) -}}
{{- end -}}
{{- $_ := set $out "resource_quota_hard" $hard -}}
{{- if .Values.kueue.enabled -}}
{{- $_ := set $out "cluster_queue" .Values.kueue.clusterQueue.name -}}
{{- end -}}
{{- toJson $out -}}
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
