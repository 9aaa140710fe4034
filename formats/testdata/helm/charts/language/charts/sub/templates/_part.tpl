{{- define "sub.unused" }}x{{ end -}}
part of {{ .Chart.Name }}
