{{- /* Combinations the schema cannot express; failing here names the value to change. */}}
{{- if eq .Values.mode "headless" }}
{{- if not (include "locust.hasSla" .) }}
{{- fail "mode=headless grades the run, so it needs the SLA contract: set config.sla (slabench deploy --sla FILE) or config.existingConfigMap" }}
{{- end }}
{{- if and (eq .Values.headless.kind "sweep") (not (or .Values.config.sweep .Values.config.existingConfigMap)) }}
{{- fail "headless.kind=sweep needs the sweep config: set config.sweep (slabench deploy --sweep FILE) or config.existingConfigMap" }}
{{- end }}
{{- end }}
