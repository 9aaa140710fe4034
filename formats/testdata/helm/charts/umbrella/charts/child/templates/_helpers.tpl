{{- define "shared.name" -}}child-loses{{- end -}}
{{- define "child.fullname" -}}{{ .Release.Name }}-{{ .Chart.Name }}{{- end -}}
