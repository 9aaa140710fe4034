{{- define "libby.labels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
owner: {{ .Values.global.labels.owner }}
{{- end -}}
