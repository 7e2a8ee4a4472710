{{- define "fleet.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slabench
{{- end }}

{{- define "fleet.discoveryTerms" -}}
- tags:
    karpenter.sh/discovery: {{ .Values.clusterName | quote }}
{{- end }}

{{/* Requirements every pool shares. */}}
{{- define "fleet.baseRequirements" -}}
- key: kubernetes.io/arch
  operator: In
  values: ["amd64"]
- key: kubernetes.io/os
  operator: In
  values: ["linux"]
{{- end }}

{{/* The NodePool disruption block. Argument: dict "ctx" $ "after" <consolidateAfter>. */}}
{{- define "fleet.disruption" -}}
consolidationPolicy: {{ .ctx.Values.disruption.consolidationPolicy }}
consolidateAfter: {{ .after }}
{{- with .ctx.Values.disruption.budgets }}
budgets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "fleet.nodeClassRef" -}}
group: karpenter.k8s.aws
kind: EC2NodeClass
name: {{ . }}
{{- end }}
