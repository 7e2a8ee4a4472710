{{- /* Combinations the schema cannot express; failing here names the value to change. */}}
{{- if regexMatch "(^|,)(\\./)?shapes/" .Values.locustfile }}
{{- fail (printf "locustfile %s names a load shape: set shape=shapes/<name>.py instead (with a shape, headless mode passes no -u/-r/-t)" .Values.locustfile) }}
{{- end }}
{{- if eq .Values.mode "headless" }}
{{- if not (include "locust.hasSla" .) }}
{{- fail "mode=headless grades the run, so it needs the SLA contract: set config.sla (slabench deploy --sla FILE) or config.existingConfigMap" }}
{{- end }}
{{- if and (eq .Values.headless.kind "sweep") (not (or .Values.config.sweep .Values.config.existingConfigMap)) }}
{{- fail "headless.kind=sweep needs the sweep config: set config.sweep (slabench deploy --sweep FILE) or config.existingConfigMap" }}
{{- end }}
{{- end }}
{{- with .Values.master.ingress }}
{{- if and .enabled (eq $.Values.mode "web") }}
{{- if not .auth.type }}
{{- fail "master.ingress.enabled exposes the Locust UI (which can start load) without a login: set master.ingress.auth (oidc or cognito) — or use kubectl port-forward" }}
{{- end }}
{{- if not .certificateArn }}
{{- fail "master.ingress.auth needs HTTPS: set master.ingress.certificateArn (the ALB authenticates on HTTPS listeners only)" }}
{{- end }}
{{- $need := ternary (list "issuer" "authorizationEndpoint" "tokenEndpoint" "userInfoEndpoint" "secretName") (list "userPoolARN" "userPoolClientID" "userPoolDomain") (eq .auth.type "oidc") }}
{{- $given := get .auth .auth.type }}
{{- range $need }}
{{- if not (get $given .) }}
{{- fail (printf "master.ingress.auth.%s.%s is required for auth.type=%s" $.Values.master.ingress.auth.type . $.Values.master.ingress.auth.type) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
