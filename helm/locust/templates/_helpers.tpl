{{- define "locust.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped name, short enough for "-master"/"-workers" suffixes within 63 characters. */}}
{{- define "locust.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 48 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "locust.selectorLabels" -}}
app.kubernetes.io/name: {{ include "locust.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "locust.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "locust.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slabench
{{- end }}

{{- define "locust.image" -}}
{{- if .digest }}
{{- printf "%s@%s" .repository .digest }}
{{- else }}
{{- printf "%s:%s" .repository .tag }}
{{- end }}
{{- end }}

{{- define "locust.masterService" -}}
{{- printf "%s-master" (include "locust.fullname" .) }}
{{- end }}

{{- define "locust.configMapName" -}}
{{- default (printf "%s-config" (include "locust.fullname" .)) .Values.config.existingConfigMap }}
{{- end }}

{{- define "locust.hasSla" -}}
{{- if or .Values.config.existingConfigMap .Values.config.sla }}true{{ end }}
{{- end }}

{{/* Workers run unless a headless sweep drives its own load processes. */}}
{{- define "locust.hasWorkers" -}}
{{- if or (eq .Values.mode "web") (eq .Values.headless.kind "burst") }}true{{ end }}
{{- end }}

{{/* What -f loads: the locustfile(s), then the shape file if one is set. Workers load it too: the shape's
     options and its open-loop dispatcher live in that module. */}}
{{- define "locust.files" -}}
{{- if .Values.shape }}{{ printf "%s,%s" .Values.locustfile .Values.shape }}{{ else }}{{ .Values.locustfile }}{{ end }}
{{- end }}

{{/* Flags both the master and the workers need. */}}
{{- define "locust.commonArgs" -}}
- locust
- -f
- {{ include "locust.files" . }}
{{- if .Values.apiKey.secretName }}
- --api-key-env
- {{ .Values.apiKey.envVar }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* The master's command line, for both the web Deployment and the headless Job. */}}
{{- define "locust.masterArgs" -}}
{{- if and (eq .Values.mode "headless") (eq .Values.headless.kind "sweep") }}
{{- /* Always the server under test: a sweep config without target.url would otherwise start the simulator. */}}
- slabench
- sweep
- --config
- /config/sweep.yaml
- --sla
- /config/sla.yaml
- --target-url
- {{ .Values.targetHost }}
{{- /* Under the uploaded results volume, whatever output_dir the config names (the root filesystem is read-only). */}}
- --output-dir
- /app/runs
{{- with .Values.headless.runId }}
- --sweep-id
- {{ . | quote }}
{{- end }}
{{- else }}
{{ include "locust.commonArgs" . | trim }}
- --master
- --expect-workers
- {{ .Values.workers.replicas | quote }}
{{- if eq .Values.mode "headless" }}
- --headless
- --expect-workers-max-wait
- {{ .Values.headless.expectWorkersMaxWaitSeconds | quote }}
{{- /* A shape drives users, rate and the end of the run itself (an open-loop queue ends when it has drained). */}}
{{- if not .Values.shape }}
- -u
- {{ .Values.headless.users | quote }}
- -r
- {{ .Values.headless.spawnRate | quote }}
- -t
- {{ .Values.headless.runTime | quote }}
{{- end }}
{{- end }}
- --host
- {{ .Values.targetHost }}
- --records
- /results/records.jsonl
{{- if include "locust.hasSla" . }}
- --sla
- /config/sla.yaml
{{- end }}
{{- if and (eq .Values.mode "headless") .Values.headless.runId }}
- --run-id
- {{ .Values.headless.runId | quote }}
{{- end }}
{{- end }}
{{- if eq .Values.mode "headless" }}
{{- range .Values.headless.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- define "locust.workerArgs" -}}
{{ include "locust.commonArgs" . | trim }}
- --worker
- --master-host
- {{ include "locust.masterService" . }}
- --master-port
- "5557"
{{- end }}

{{/* Pod-level settings shared by master, workers and test pods. Argument: dict "ctx" $ "sa" <name>. */}}
{{- define "locust.podSpecCommon" -}}
{{- $ := .ctx -}}
serviceAccountName: {{ .sa }}
automountServiceAccountToken: {{ .token | default false }}
enableServiceLinks: false
{{- with $.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml $.Values.podSecurityContext | nindent 2 }}
{{- with $.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "locust.podAnnotations" -}}
{{- $a := deepCopy .Values.podAnnotations }}
{{- if .Values.doNotDisrupt }}
{{- $_ := set $a "karpenter.sh/do-not-disrupt" "true" }}
{{- end }}
{{- with $a }}{{ toYaml . }}{{ end }}
{{- end }}

{{/* Environment of every locust process. Argument: dict "ctx" $ "apiKey" <bool>. */}}
{{- define "locust.env" -}}
{{- $ := .ctx -}}
- name: HOME
  value: /tmp
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
- name: PYTHONUNBUFFERED
  value: "1"
- name: AWS_REGION
  value: {{ $.Values.aws.region | quote }}
- name: AWS_DEFAULT_REGION
  value: {{ $.Values.aws.region | quote }}
{{- if and .apiKey $.Values.apiKey.secretName }}
- name: {{ $.Values.apiKey.envVar }}
  valueFrom:
    secretKeyRef:
      name: {{ $.Values.apiKey.secretName }}
      key: {{ $.Values.apiKey.secretKey }}
{{- end }}
{{- end }}

{{/* Writable places on a read-only root filesystem; runs/ under the workdir keeps `slabench` defaults working. */}}
{{- define "locust.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: results
  mountPath: /results
- name: results
  mountPath: /app/runs
  subPath: runs
- name: config
  mountPath: /config
  readOnly: true
{{- end }}

{{- define "locust.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: 1Gi
- name: results
  emptyDir:
    sizeLimit: {{ .Values.results.sizeLimit }}
- name: config
  configMap:
    name: {{ include "locust.configMapName" . }}
{{- end }}

{{/* ServiceAccount of a component ("master" or "worker"); "default" when the chart does not create them. */}}
{{- define "locust.serviceAccountName" -}}
{{- if .ctx.Values.serviceAccount.create }}
{{- printf "%s-%s" (include "locust.fullname" .ctx) .role }}
{{- else }}
{{- "default" }}
{{- end }}
{{- end }}

{{/* Does the headless master read the serving pods' nodes (provenance)? Needs the API and its own account. */}}
{{- define "locust.readsNodes" -}}
{{- if and (eq .Values.mode "headless") .Values.provenance.servingSelector .Values.serviceAccount.create }}true{{ end }}
{{- end }}

{{/* The master container. In headless mode run-job.sh wraps the command: upload at the end, exit = verdict. */}}
{{- define "locust.masterContainer" -}}
- name: master
  image: {{ include "locust.image" .Values.image }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  workingDir: /app
  {{- if eq .Values.mode "headless" }}
  command: ["/bin/sh", "/scripts/run-job.sh"]
  {{- end }}
  args:
    {{- include "locust.masterArgs" . | trim | nindent 4 }}
  env:
    {{- /* Only a sweep sends requests from the master itself; a Locust master just coordinates. */}}
    {{- include "locust.env" (dict "ctx" . "apiKey" (eq .Values.headless.kind "sweep")) | nindent 4 }}
    {{- if eq .Values.mode "headless" }}
    - name: RESULTS_DIR
      {{- /* a sweep's own directory (the results volume's runs/<id>), so its files are the results' root */}}
      value: {{ if and (eq .Values.headless.kind "sweep") .Values.headless.runId }}{{ printf "/results/runs/%s" .Values.headless.runId }}{{ else }}/results{{ end }}
    - name: RESULTS_S3_URI
      value: {{ .Values.results.s3Uri | quote }}
    {{- if include "locust.readsNodes" . }}
    - name: SLABENCH_SERVING_SELECTOR
      value: {{ .Values.provenance.servingSelector | quote }}
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    {{- end }}
    {{- end }}
  ports:
    - name: master-p1
      containerPort: 5557
      protocol: TCP
    {{- if eq .Values.mode "web" }}
    - name: web
      containerPort: 8089
      protocol: TCP
    {{- end }}
  {{- if eq .Values.mode "web" }}
  readinessProbe:
    httpGet:
      path: /
      port: web
    periodSeconds: 10
  livenessProbe:
    httpGet:
      path: /
      port: web
    periodSeconds: 20
    failureThreshold: 6
  {{- end }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.master.resources | nindent 4 }}
  volumeMounts:
    {{- include "locust.volumeMounts" . | nindent 4 }}
    - name: scripts
      mountPath: /scripts
      readOnly: true
{{- end }}

{{- define "locust.workerContainer" -}}
- name: worker
  image: {{ include "locust.image" .Values.image }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  workingDir: /app
  args:
    {{- include "locust.workerArgs" . | nindent 4 }}
  env:
    {{- include "locust.env" (dict "ctx" . "apiKey" true) | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.workers.resources | nindent 4 }}
  volumeMounts:
    {{- include "locust.volumeMounts" . | nindent 4 }}
{{- end }}

{{/* Policy scan exception for pods that get the API key as an env var (rendered only when a key is configured). */}}
{{- define "locust.secretEnvSkip" -}}
{{- if .Values.apiKey.secretName -}}
checkov.io/skip-ckv-k8s-35: CKV_K8S_35=the key is in a Kubernetes Secret; the suite takes it only from the env var named by --api-key-env
{{- end }}
{{- end }}
