{{/*
A `helm test` pod running one of the chart's check scripts in the suite image.
Arguments: dict "ctx" $ "name" <suffix> "script" <file in the tests ConfigMap> "env" <list> "sa" <account or ""> "secretEnv" <bool>.
*/}}
{{- define "vllm-serving.testPod" -}}
{{- $ := .ctx }}
apiVersion: v1
kind: Pod
metadata:
  name: {{ include "vllm-serving.fullname" $ }}-{{ .name }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "vllm-serving.labels" $ | nindent 4 }}
    app.kubernetes.io/component: test
  annotations:
    helm.sh/hook: test
    helm.sh/hook-delete-policy: before-hook-creation
    # Policy scan exceptions, reviewed: a one-shot check pod has nothing to probe.
    checkov.io/skip-ckv-k8s-8: CKV_K8S_8=one-shot helm test pod, it exits when the check is done
    checkov.io/skip-ckv-k8s-9: CKV_K8S_9=one-shot helm test pod, it serves no traffic
    {{- if .sa }}
    checkov.io/skip-ckv-k8s-38: CKV_K8S_38=this check reads pods through the API with a read-only Role
    {{- end }}
    {{- if .secretEnv }}
    checkov.io/skip-ckv-k8s-35: CKV_K8S_35=the key is in a Kubernetes Secret; the check passes it the way vLLM takes it, as an env var
    {{- end }}
spec:
  restartPolicy: Never
  {{- if .sa }}
  serviceAccountName: {{ .sa }}
  {{- end }}
  # Only the readiness-gate check talks to the Kubernetes API.
  automountServiceAccountToken: {{ ternary "true" "false" (not (empty .sa)) }}
  enableServiceLinks: false
  securityContext:
    {{- toYaml $.Values.podSecurityContext | nindent 4 }}
  containers:
    - name: check
      image: {{ include "vllm-serving.image" $.Values.weightCache.image }}
      imagePullPolicy: {{ $.Values.weightCache.image.pullPolicy }}
      command: ["python3", "/scripts/{{ .script }}"]
      env:
        {{- toYaml .env | nindent 8 }}
      securityContext:
        {{- toYaml $.Values.securityContext | nindent 8 }}
      resources:
        requests:
          cpu: 50m
          memory: 64Mi
        limits:
          cpu: 500m
          memory: 256Mi
      volumeMounts:
        - name: scripts
          mountPath: /scripts
          readOnly: true
  volumes:
    - name: scripts
      configMap:
        name: {{ include "vllm-serving.fullname" $ }}-tests
  {{- with $.Values.tests.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $.Values.tests.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
