{{- define "constructs.labels" -}}
{{- range $k, $v := .Values.labels }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end -}}

{{- define "constructs.name" -}}
{{ .Release.Name }}-{{ .Values.name | default "x" | lower | trunc 20 }}
{{- end -}}

{{- define "constructs.ctx" -}}
{{ .a }}/{{ .b }}/{{ .root.Release.Namespace }}
{{- end -}}

{{- block "constructs.block" . -}}
default-block
{{- end -}}
