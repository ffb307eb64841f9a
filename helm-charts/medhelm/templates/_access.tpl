{{/* Who may see patient text (docs/access.md): the dashboard's sign-in (OpenID Connect via Streamlit's
     st.login), its role policy, and the callers allowed on the gRPC services. Secrets are referenced by
     name, never rendered. */}}

{{- define "medhelm.oidcEnabled" -}}{{ if .Values.auth.oidc.enabled }}true{{ end }}{{- end -}}

{{- define "medhelm.callersEnabled" -}}
{{ if or .Values.auth.callers.tokenSecret .Values.auth.callers.allowClients }}true{{ end }}
{{- end -}}

{{- define "medhelm.redirectUri" -}}
{{- if .Values.auth.oidc.redirectUri -}}{{ .Values.auth.oidc.redirectUri }}
{{- else if .Values.ingress.host -}}https://{{ .Values.ingress.host }}/oauth2callback
{{- else -}}{{ fail "auth.oidc.redirectUri (or ingress.host) is required when auth.oidc.enabled" }}{{- end -}}
{{- end -}}

{{/* Dashboard args: sign-in, or (no identity provider configured) aggregates only for everyone. */}}
{{- define "medhelm.dashboardAuthArgs" -}}
{{- if .Values.auth.oidc.enabled }}
- --oidc-issuer={{ required "auth.oidc.issuer is required when auth.oidc.enabled" .Values.auth.oidc.issuer }}
- --oidc-client-id={{ required "auth.oidc.clientId is required when auth.oidc.enabled" .Values.auth.oidc.clientId }}
- --oidc-redirect-uri={{ include "medhelm.redirectUri" . }}
- --access-policy=/etc/medhelm/access/access.yaml
{{- else }}
- --insecure-no-auth
{{- if not .Values.auth.openDashboardShowsText }}
- --redacted
{{- end }}
{{- end }}
{{- end -}}

{{- define "medhelm.dashboardAuthEnv" -}}
{{- if .Values.auth.oidc.enabled }}
{{- $secret := required "auth.oidc.secretName (client secret + cookie secret) is required when auth.oidc.enabled" .Values.auth.oidc.secretName }}
- name: MEDHELM_OIDC_CLIENT_SECRET
  valueFrom:
    secretKeyRef: {name: {{ $secret }}, key: {{ .Values.auth.oidc.clientSecretKey }}}
- name: MEDHELM_OIDC_COOKIE_SECRET
  valueFrom:
    secretKeyRef: {name: {{ $secret }}, key: {{ .Values.auth.oidc.cookieSecretKey }}}
{{- end }}
{{- end -}}

{{- define "medhelm.dashboardAuthMounts" -}}
{{- if .Values.auth.oidc.enabled }}
- name: access-policy
  mountPath: /etc/medhelm/access
  readOnly: true
{{- end }}
{{- end -}}

{{- define "medhelm.dashboardAuthVolumes" -}}
{{- if .Values.auth.oidc.enabled }}
- name: access-policy
  configMap:
    name: {{ include "medhelm.fullname" . }}-access
{{- end }}
{{- end -}}

{{/* gRPC services: bearer tokens from a Secret and/or mTLS identities; none configured = open inside the
     namespace (the NetworkPolicy still admits only the Job and the dashboard). */}}
{{- define "medhelm.serviceAuthArgs" -}}
{{- if .Values.auth.callers.tokenSecret }}
- --caller-tokens=/etc/medhelm/callers/callers
{{- end }}
{{- range .Values.auth.callers.allowClients }}
- --allow-client={{ . }}
{{- end }}
{{- if not (include "medhelm.callersEnabled" .) }}
- --insecure-no-auth
{{- end }}
{{- end -}}

{{- define "medhelm.serviceAuthMounts" -}}
{{- if .Values.auth.callers.tokenSecret }}
- name: callers
  mountPath: /etc/medhelm/callers
  readOnly: true
{{- end }}
{{- end -}}

{{- define "medhelm.serviceAuthVolumes" -}}
{{- if .Values.auth.callers.tokenSecret }}
- name: callers
  secret:
    secretName: {{ .Values.auth.callers.tokenSecret }}
    items: [{key: callers, path: callers}]
{{- end }}
{{- end -}}

{{/* The Job: its own token only (key `job` of the same Secret). */}}
{{- define "medhelm.jobAuthEnv" -}}
{{- if .Values.auth.callers.tokenSecret }}
- name: MEDHELM_SERVICE_TOKEN_FILE
  value: /etc/medhelm/callers/job
{{- end }}
{{- end -}}

{{- define "medhelm.jobAuthVolumes" -}}
{{- if .Values.auth.callers.tokenSecret }}
- name: callers
  secret:
    secretName: {{ .Values.auth.callers.tokenSecret }}
    items: [{key: job, path: job}]
{{- end }}
{{- end -}}
