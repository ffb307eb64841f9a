{{/* Names and shared pieces of the medhelm chart. */}}
{{- define "medhelm.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "medhelm.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "medhelm.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "medhelm.claim" -}}
{{- if .Values.storage.create -}}{{ include "medhelm.fullname" . }}-data{{- else -}}{{ required "storage.existingClaim is required when storage.create is false" .Values.storage.existingClaim }}{{- end -}}
{{- end -}}

{{/* Arguments every medhelm process shares: where results and the model registry live. */}}
{{- define "medhelm.pathArgs" -}}
- --output-path={{ .Values.storage.mountPath }}/benchmark_output
- --local-path={{ .Values.storage.mountPath }}/prod_env
{{- end -}}

{{- define "medhelm.env" -}}
- name: HOME
  value: /tmp
- name: MEDHELM_OFFLINE
  value: "1"
{{- with .Values.storage.dataDir }}
- name: MEDHELM_DATA_DIR  # the local mirror of benchmark files (must exist on the volume)
  value: {{ $.Values.storage.mountPath }}/{{ . }}
{{- end }}
- name: MEDHELM_MODEL_DEPLOYMENTS  # the chart's registry, read after <local-path>/model_deployments.yaml
  value: /etc/medhelm/deployments/model_deployments.yaml
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* envFrom for the containers that call models (the jury and metrics services, the Job): the Secrets
     holding the API keys model_deployments.yaml names in api_key_env. */}}
{{- define "medhelm.envFrom" -}}
{{- with .Values.envFrom }}
envFrom:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The results store's URL: only for the pods that read or write the store (dashboard, summarize),
     from the Secret, as an env var (never in argv, where `ps` and the pod spec's args would show it). */}}
{{- define "medhelm.storeEnv" -}}
{{- if eq .Values.resultsStore.kind "postgres" }}
- name: MEDHELM_STORE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "resultsStore.postgres.secretName is required for kind postgres" .Values.resultsStore.postgres.secretName }}
      key: {{ .Values.resultsStore.postgres.secretKey }}
{{- end }}
{{- end -}}

{{- define "medhelm.volumeMounts" -}}
- name: data
  mountPath: {{ .Values.storage.mountPath }}
- name: model-deployments  # a folder, not a subPath: running pods see updates
  mountPath: /etc/medhelm/deployments
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* TLS material: the services mount the server Secret; the Job mounts its own client Secret
     (tls.clientSecretName) and never sees the server's key. Call with (dict "root" $ "side" "server"|"client"). */}}
{{- define "medhelm.tlsMount" -}}
{{- if .root.Values.tls.enabled }}
- name: tls
  mountPath: /etc/medhelm/tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "medhelm.tlsVolume" -}}
{{- $tls := .root.Values.tls -}}
{{- if $tls.enabled }}
- name: tls
  secret:
    optional: false  # explicit (the default): no pod starts without its certificates
    {{- if eq .side "server" }}
    secretName: {{ required "tls.secretName is required when tls.enabled" $tls.secretName }}
    {{- else if $tls.mutual }}
    secretName: {{ required "tls.clientSecretName is required when tls.mutual (the Job's own client certificate)" $tls.clientSecretName }}
    {{- else }}
    secretName: {{ $tls.clientSecretName | default $tls.secretName }}
    items:
      - key: ca.crt
        path: ca.crt
    {{- end }}
{{- end }}
{{- end -}}

{{- define "medhelm.volumes" -}}
- name: data
  persistentVolumeClaim:
    claimName: {{ include "medhelm.claim" . }}
- name: model-deployments
  configMap:
    name: {{ include "medhelm.fullname" . }}-deployments
- name: tmp
  emptyDir: {}
{{- end -}}

{{- define "medhelm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ .Values.serviceAccount.name | default (include "medhelm.fullname" .) }}
{{- else -}}{{ .Values.serviceAccount.name | default "default" }}{{- end -}}
{{- end -}}

{{/* Pod annotations that roll the pods when the model registry changes (clients and caches are built
     from it at start). */}}
{{- define "medhelm.podAnnotations" -}}
checksum/model-deployments: {{ include "medhelm.modelDeployments" . | sha256sum }}
{{- end -}}

{{- define "medhelm.podSpecCommon" -}}
serviceAccountName: {{ include "medhelm.serviceAccountName" . }}
automountServiceAccountToken: false
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* model_deployments.yaml: .Values.modelDeployments, or generated from .Values.inferenceServices
     (KServe's OpenAI-compatible route of each one). */}}
{{- define "medhelm.modelDeployments" -}}
{{- if .Values.modelDeployments -}}
{{ .Values.modelDeployments }}
{{- else -}}
# generated from .Values.inferenceServices: KServe's OpenAI-compatible route of each one
model_deployments:
{{- range .Values.inferenceServices }}
  - name: {{ .deploymentName | default (printf "kserve/%s" .name) }}
    model_name: {{ .modelName }}
    kind: openai
    base_url: http://{{ .name }}-predictor.{{ $.Release.Namespace }}.svc.cluster.local/openai/v1
    served_model_name: {{ .servedModelName | default .name | quote }}
    max_sequence_length: {{ .maxModelLen | default 8192 }}
{{- else }}
  []
{{- end }}
{{- end -}}
{{- end -}}


{{/* The evaluation Job's manifest (templates/job.yaml, the job-template ConfigMap, and each schedule's
     CronJob in templates/cronjobs.yaml, which passes .medhelmSchedule: extra args after the path args, the
     Job's name from the downward API, the store env for the last shard's summarize, a run-entries .conf). */}}
{{- define "medhelm.jobManifest" -}}
{{- $full := include "medhelm.fullname" . -}}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ $full }}-eval-{{ .Values.job.suite }}
  annotations:
    checkov.io/skip1: CKV_K8S_8=a shard runs to completion; a hung shard is bounded by request timeouts and retries
    checkov.io/skip2: CKV_K8S_9=no traffic is routed to a shard
  labels:
    {{- include "medhelm.labels" . | nindent 4 }}
    app.kubernetes.io/component: job
    medhelm.io/suite: {{ .Values.job.suite }}
    {{- with .medhelmSchedule }}
    medhelm.io/schedule: {{ .name }}
    {{- end }}
spec:
  completionMode: Indexed
  completions: {{ .Values.job.completions }}
  parallelism: {{ .Values.job.parallelism }}
  backoffLimitPerIndex: {{ .Values.job.backoffLimitPerIndex }}
  ttlSecondsAfterFinished: {{ .Values.job.ttlSecondsAfterFinished }}
  template:
    metadata:
      annotations:
        {{- include "medhelm.podAnnotations" . | nindent 8 }}
      labels:
        {{- include "medhelm.labels" . | nindent 8 }}
        app.kubernetes.io/component: job
        medhelm.io/suite: {{ .Values.job.suite }}
        {{- with .medhelmSchedule }}
        medhelm.io/schedule: {{ .name }}
        {{- end }}
    spec:
      restartPolicy: Never
      {{- include "medhelm.podSpecCommon" . | nindent 6 }}
      containers:
        - name: shard
          image: {{ include "medhelm.image" . }}
          imagePullPolicy: {{ .Values.image.pullPolicy }}
          args:
            - job
            - --suite={{ .Values.job.suite }}
            - --max-concurrency={{ .Values.job.maxConcurrency }}
            - --quiet
            {{- include "medhelm.pathArgs" . | nindent 12 }}
            {{- with .medhelmSchedule }}
            {{- range .args }}
            - {{ . | quote }}
            {{- end }}
            {{- end }}
            {{- with .Values.job.runEntries }}
            - --run-entries
            {{- range . }}
            - {{ . | quote }}
            {{- end }}
            {{- end }}
          {{- include "medhelm.envFrom" . | nindent 10 }}
          env:
            {{- include "medhelm.env" . | nindent 12 }}
            {{- include "medhelm.cacheEnv" . | nindent 12 }}
            {{- include "medhelm.jobMetricsEnv" . | nindent 12 }}
            - name: MEDHELM_SHARD_COUNT
              value: {{ .Values.job.completions | quote }}
            - name: MEDHELM_SHARD_PARALLELISM  # shards at once: each takes 1/n of a deployment's rate budget
              value: {{ .Values.job.parallelism | quote }}
            {{- include "medhelm.jobAuthEnv" . | nindent 12 }}
            {{- if .Values.job.useServices }}
            {{- range $name := list "scenario" "jury" "metrics" }}
            {{- $svc := index $.Values.services (ternary "scenarios" $name (eq $name "scenario")) }}
            - name: MEDHELM_{{ upper $name }}_SERVICE
              value: {{ printf "%s-%s:%v" $full (ternary "scenarios" $name (eq $name "scenario")) $svc.port | quote }}
            {{- end }}
            - name: MEDHELM_BENCHMARK_ROOTS  # the folder shared with the services: file args are sent as names under it
              value: {{ .Values.storage.mountPath | quote }}
            {{- end }}
            {{- if .Values.tls.enabled }}
            - name: MEDHELM_TLS_CA
              value: /etc/medhelm/tls/ca.crt
            {{- if .Values.tls.mutual }}
            - name: MEDHELM_TLS_CERT  # the Job's own client certificate (tls.clientSecretName)
              value: /etc/medhelm/tls/tls.crt
            - name: MEDHELM_TLS_KEY
              value: /etc/medhelm/tls/tls.key
            {{- end }}
            {{- end }}
            {{- if .medhelmSchedule }}
            - name: MEDHELM_JOB_NAME  # <cronjob>-<scheduled minute>: the suite's date (medhelm/schedules.py)
              valueFrom:
                fieldRef:
                  fieldPath: metadata.labels['batch.kubernetes.io/job-name']
            {{- include "medhelm.storeEnv" . | nindent 12 }}
            {{- end }}
          {{- include "medhelm.jobMetricsPorts" . | nindent 10 }}
          securityContext:
            {{- toYaml .Values.containerSecurityContext | nindent 12 }}
          resources:
            {{- toYaml .Values.job.resources | nindent 12 }}
          volumeMounts:
            {{- include "medhelm.volumeMounts" . | nindent 12 }}
            {{- include "medhelm.tlsMount" (dict "root" .) | nindent 12 }}
            {{- include "medhelm.serviceAuthMounts" . | nindent 12 }}
            {{- with .medhelmSchedule }}{{ if .confMap }}
            - name: conf
              mountPath: /etc/medhelm/conf
              readOnly: true
            {{- end }}{{ end }}
      volumes:
        {{- include "medhelm.volumes" . | nindent 8 }}
        {{- include "medhelm.tlsVolume" (dict "root" . "side" "client") | nindent 8 }}
        {{- include "medhelm.jobAuthVolumes" . | nindent 8 }}
        {{- with .medhelmSchedule }}{{ if .confMap }}
        - name: conf
          configMap:
            name: {{ .confMap }}
        {{- end }}{{ end }}
{{- end -}}

{{/* One request-cache file per writer on the shared (network) volume, with a rollback journal: SQLite's
     WAL cannot work across hosts. {writer} = shard-<index> in the Job, the pod's name in a service. */}}
{{- define "medhelm.cacheEnv" -}}
- name: MEDHELM_CACHE_FILE
  value: {{ .Values.storage.mountPath }}/prod_env/cache/requests-{writer}.sqlite
- name: MEDHELM_CACHE_JOURNAL
  value: delete
{{- end -}}
