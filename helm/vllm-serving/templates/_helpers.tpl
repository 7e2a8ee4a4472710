{{/* Chart name, truncated to the 63-character DNS label limit. */}}
{{- define "vllm-serving.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped name; the release name alone when it already contains the chart name. */}}
{{- define "vllm-serving.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "vllm-serving.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vllm-serving.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "vllm-serving.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "vllm-serving.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slabench
{{- end }}

{{/* repository@digest when a digest is pinned, else repository:tag. Argument: an image values map. */}}
{{- define "vllm-serving.image" -}}
{{- if .digest }}
{{- printf "%s@%s" .repository .digest }}
{{- else }}
{{- printf "%s:%s" .repository .tag }}
{{- end }}
{{- end }}

{{- define "vllm-serving.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "vllm-serving.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* MODEL/REVISION: the cache key shared by S3, the host cache and the container path. */}}
{{- define "vllm-serving.modelKey" -}}
{{- printf "%s/%s" .Values.model.name .Values.model.revision }}
{{- end }}

{{- define "vllm-serving.weightsSource" -}}
{{- $prefix := trimAll "/" .Values.weightCache.prefix }}
{{- if $prefix }}
{{- printf "s3://%s/%s/%s" .Values.weightCache.bucket $prefix (include "vllm-serving.modelKey" .) }}
{{- else }}
{{- printf "s3://%s/%s" .Values.weightCache.bucket (include "vllm-serving.modelKey" .) }}
{{- end }}
{{- end }}

{{- define "vllm-serving.weightsDest" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.weightCache.hostRoot) (include "vllm-serving.modelKey" .) }}
{{- end }}

{{- define "vllm-serving.modelPath" -}}
{{- printf "%s/%s" (trimSuffix "/" .Values.weightCache.mountPath) (include "vllm-serving.modelKey" .) }}
{{- end }}

{{/* Requests (running + waiting) each replica should carry under autoscaling: a share of max_num_seqs. */}}
{{- define "vllm-serving.loadPerReplica" -}}
{{- max 1 (floor (mulf (float64 .Values.model.maxNumSeqs) (float64 .Values.autoscaling.targetUtilization))) | int }}
{{- end }}
