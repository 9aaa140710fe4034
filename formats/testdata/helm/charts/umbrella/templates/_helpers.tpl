{{- define "shared.name" -}}parent-wins{{- end -}}
