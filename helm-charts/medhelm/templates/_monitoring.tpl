{{/* Observability pieces (docs/observability.md): the Job pods' /metrics, shared by templates/job.yaml. */}}
{{- define "medhelm.jobMetricsEnv" -}}
{{- if .Values.monitoring.jobMetrics.enabled }}
- name: MEDHELM_METRICS_PORT
  value: {{ .Values.metricsPort | quote }}
- name: MEDHELM_METRICS_HOST
  value: 0.0.0.0
- name: MEDHELM_METRICS_LINGER_S
  value: {{ .Values.monitoring.jobMetrics.lingerSeconds | quote }}
{{- end }}
{{- with .Values.monitoring.pushgateway.url }}
- name: MEDHELM_PUSHGATEWAY
  value: {{ . | quote }}
{{- end }}
- name: MEDHELM_TERMINATION_LOG
  value: /dev/termination-log
{{- end -}}

{{- define "medhelm.jobMetricsPorts" -}}
{{- if .Values.monitoring.jobMetrics.enabled }}
ports:
  - name: metrics
    containerPort: {{ .Values.metricsPort }}
{{- end }}
{{- end -}}
