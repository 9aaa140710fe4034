{{- define "tplvalues.fullname" -}}
{{ .Release.Name }}-{{ .Values.suffix }}
{{- end }}
