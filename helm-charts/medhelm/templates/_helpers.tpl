{{/* Names and shared pieces of the medhelm chart. */}}
{{/* <release>-medhelm (or the release name when it holds "medhelm"). Never truncated (two releases could
     collide): a prefix that would make any name the chart builds from it (longest suffix: 18 characters,
     e.g. -dashboard-ingress) longer than a DNS label's 63 characters fails the render, naming the value. */}}
{{- define "medhelm.fullname" -}}
{{- $name := ternary .Release.Name (printf "%s-%s" .Release.Name .Chart.Name) (contains .Chart.Name .Release.Name) -}}
{{- if gt (len $name) 45 -}}
{{- fail (printf "release name '%s' is too long: names such as %s-dashboard-ingress would exceed 63 characters; shorten the release name to at most %d characters" .Release.Name $name (sub (len .Release.Name) (sub (len $name) 45))) -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/* Fails the render when a name is longer than a DNS label (63). Call with (list name "the value to shorten"). */}}
{{- define "medhelm.checkName" -}}
{{- $name := index . 0 -}}
{{- if gt (len $name) 63 -}}
{{- fail (printf "name %s is %d characters (Kubernetes allows 63): shorten %s" $name (len $name) (index . 1)) -}}
{{- end -}}
{{- end -}}

{{/* A Kubernetes quantity as a plain number (cpu in cores, memory in bytes), for comparing requests and
     limits at render time. The schema (definitions/quantity) already refused anything else. */}}
{{- define "medhelm.quantity" -}}
{{- $q := toString . -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- $factor := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- mulf (float64 $num) (index $factor (trimPrefix $num $q)) -}}
{{- end -}}

{{/* Refuses requests above limits (the API server would reject the pod only when it is created, long after
     the install). Call with (list resources "the values path"). */}}
{{- define "medhelm.checkResources" -}}
{{- $res := index . 0 | default dict -}}
{{- $limits := $res.limits | default dict -}}
{{- range $what, $req := ($res.requests | default dict) -}}
{{- if hasKey $limits $what -}}
{{- if gt (float64 (include "medhelm.quantity" $req)) (float64 (include "medhelm.quantity" (index $limits $what))) -}}
{{- fail (printf "%s.requests.%s (%v) is above its limit (%v)" (index $ 1) $what $req (index $limits $what)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The egress rule every fenced pod needs: the cluster DNS. */}}
{{- define "medhelm.dnsEgress" -}}
- to:
    - namespaceSelector: {}
      podSelector:
        matchLabels:
          k8s-app: kube-dns
  ports:
    - protocol: UDP
      port: 53
    - protocol: TCP
      port: 53
{{- end -}}

{{- define "medhelm.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* An image reference from {repository, tag, digest}: repository@digest when a digest is set (pinned by
     content: what the node runs is what was scanned), else repository:tag (default: the chart's appVersion). */}}
{{- define "medhelm.imageRef" -}}
{{- $image := index . 0 -}}
{{- if $image.digest -}}
{{ $image.repository }}@{{ $image.digest }}
{{- else -}}
{{ $image.repository }}:{{ $image.tag | default (index . 1).Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The slim service image: services, Job, collect, helm test. */}}
{{- define "medhelm.image" -}}
{{ include "medhelm.imageRef" (list .Values.image .) }}
{{- end -}}

{{- define "medhelm.dashboardImage" -}}
{{ include "medhelm.imageRef" (list .Values.dashboard.image .) }}
{{- end -}}

{{/* The image a container runs, as the chart deployed it (repository@digest when image.digest is set, else
     repository:tag): a report made in the pod names it (report/content.py build_identity). Call with the
     image reference: (include "medhelm.image" .). */}}
{{- define "medhelm.imageEnv" -}}
- name: MEDHELM_IMAGE_DIGEST
  value: {{ . | quote }}
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

{{/* Model API keys (.Values.apiKeys) for one caller ("job", "jury" or "metrics"): each key the caller uses is
     a file of its own Secret key, never an env var and never a key it does not use. Call with
     (dict "root" $ "who" "jury"); medhelm.apiKeyEnv / medhelm.apiKeyMounts / medhelm.apiKeyVolumes. */}}
{{- define "medhelm.apiKeyEnv" -}}
{{- range .root.Values.apiKeys }}{{ if has $.who .usedBy }}
- name: {{ .env }}_FILE
  value: /etc/medhelm/keys/{{ .env }}
{{- end }}{{ end }}
{{- end -}}

{{- define "medhelm.apiKeyMounts" -}}
{{- $any := false }}
{{- range .root.Values.apiKeys }}{{ if has $.who .usedBy }}{{ $any = true }}{{ end }}{{ end }}
{{- if $any }}
- name: api-keys  # one folder, no subPath: a rotated key reaches the running pod
  mountPath: /etc/medhelm/keys
  readOnly: true
{{- end }}
{{- end -}}

{{- define "medhelm.apiKeyVolumes" -}}
{{- $sources := list }}
{{- range .root.Values.apiKeys }}{{ if has $.who .usedBy }}
{{- $sources = append $sources (dict "secret" (dict "name" .secretName "items" (list (dict "key" (.key | default .env) "path" .env)))) }}
{{- end }}{{ end }}
{{- if $sources }}
- name: api-keys
  projected:
    sources:
      {{- toYaml $sources | nindent 6 }}
{{- end }}
{{- end -}}

{{/* The results store's URL: only for the pods that read or write the store (dashboard, summarize), as a
     file of its Secret (MEDHELM_STORE_URL_FILE): never argv, never an env var a crash dump or `env` shows.
     medhelm.storeMount / medhelm.storeVolume put the file there. */}}
{{- define "medhelm.storeEnv" -}}
{{- if eq .Values.resultsStore.kind "postgres" }}
- name: MEDHELM_STORE_URL_FILE
  value: /etc/medhelm/store/url
{{- end }}
{{- end -}}

{{/* The same, as an env var from the Secret: for the scheduled runs' shards (the last one summarizes) and the
     collect+summarize Job, which `medhelm k8s schedule create|collect` build from the job-template ConfigMap
     (medhelm/cli/k8s.py adds env only, so the chart's CronJob carries the same to stay identical). */}}
{{- define "medhelm.storeEnvRef" -}}
{{- if eq .Values.resultsStore.kind "postgres" }}
- name: MEDHELM_STORE_URL
  valueFrom:
    secretKeyRef:
      name: {{ required "resultsStore.postgres.secretName is required for kind postgres" .Values.resultsStore.postgres.secretName }}
      key: {{ .Values.resultsStore.postgres.secretKey }}
{{- end }}
{{- end -}}

{{- define "medhelm.storeMount" -}}
{{- if eq .Values.resultsStore.kind "postgres" }}
- name: store-url
  mountPath: /etc/medhelm/store
  readOnly: true
{{- end }}
{{- end -}}

{{- define "medhelm.storeVolume" -}}
{{- if eq .Values.resultsStore.kind "postgres" }}
- name: store-url
  secret:
    optional: false  # explicit (the default): no pod starts without the store's URL
    secretName: {{ required "resultsStore.postgres.secretName is required for kind postgres" .Values.resultsStore.postgres.secretName }}
    items: [{key: {{ .Values.resultsStore.postgres.secretKey }}, path: url}]
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

{{/* TLS material: the services mount the server Secret; the Job mounts its own client Secret and never sees
     the server's key. The Secrets are yours (tls.secretName, tls.clientSecretName) or the chart's (templates/tls.yaml:
     cert-manager's or the self-signed bootstrap). Call with (dict "root" $ "side" "server"|"client"). */}}
{{- define "medhelm.tlsMount" -}}
{{- if .root.Values.tls.enabled }}
- name: tls
  mountPath: /etc/medhelm/tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "medhelm.tlsServerSecret" -}}
{{ .Values.tls.secretName | default (printf "%s-tls" (include "medhelm.fullname" .)) }}
{{- end -}}

{{- define "medhelm.tlsClientSecret" -}}
{{- if .Values.tls.clientSecretName -}}{{ .Values.tls.clientSecretName }}
{{- else if not .Values.tls.secretName -}}{{ include "medhelm.fullname" . }}-job-tls
{{- end -}}
{{- end -}}

{{- define "medhelm.tlsVolume" -}}
{{- $tls := .root.Values.tls -}}
{{- if $tls.enabled }}
- name: tls
  secret:
    optional: false  # explicit (the default): no pod starts without its certificates
    {{- if eq .side "server" }}
    secretName: {{ include "medhelm.tlsServerSecret" .root }}
    {{- else if $tls.mutual }}
    secretName: {{ required "tls.clientSecretName is required with your own tls.secretName and tls.mutual (the Job's own client certificate)" (include "medhelm.tlsClientSecret" .root) }}
    {{- else }}
    secretName: {{ include "medhelm.tlsClientSecret" .root | default (include "medhelm.tlsServerSecret" .root) }}
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
{{- include "medhelm.checkName" (list (printf "%s-eval-%s" $full .Values.job.suite) "job.suite (or the release name)") -}}
{{- include "medhelm.checkResources" (list .Values.job.resources "job.resources") -}}
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
  podFailurePolicy:
    rules:
      - action: Ignore  # a drain, preemption or eviction: the shard reruns (resuming from its records) for free
        onPodConditions:
          - type: DisruptionTarget
            status: "True"
      - action: FailIndex  # exit 2 is bad input (a run entry, a config): retrying cannot fix it
        onExitCodes:
          containerName: shard
          operator: In
          values: [2]
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
          env:
            {{- include "medhelm.env" . | nindent 12 }}
            {{- include "medhelm.imageEnv" (include "medhelm.image" .) | nindent 12 }}
            {{- include "medhelm.cacheEnv" . | nindent 12 }}
            {{- include "medhelm.jobMetricsEnv" . | nindent 12 }}
            {{- include "medhelm.apiKeyEnv" (dict "root" . "who" "job") | nindent 12 }}
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
            {{- include "medhelm.storeEnvRef" . | nindent 12 }}  {{- /* as `medhelm k8s schedule create` adds it */}}
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
            {{- include "medhelm.apiKeyMounts" (dict "root" . "who" "job") | nindent 12 }}
            {{- with .medhelmSchedule }}{{ if .confMap }}
            - name: conf
              mountPath: /etc/medhelm/conf
              readOnly: true
            {{- end }}{{ end }}
      volumes:
        {{- include "medhelm.volumes" . | nindent 8 }}
        {{- include "medhelm.tlsVolume" (dict "root" . "side" "client") | nindent 8 }}
        {{- include "medhelm.jobAuthVolumes" . | nindent 8 }}
        {{- include "medhelm.apiKeyVolumes" (dict "root" . "who" "job") | nindent 8 }}
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
