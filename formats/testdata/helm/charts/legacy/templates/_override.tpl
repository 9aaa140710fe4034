{{- define "legacy.body" }}
  overridden: {{ .Chart.Name }}
{{- end -}}
