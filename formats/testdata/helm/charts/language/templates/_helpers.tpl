{{/* Trim markers at the start of a line, as kyverno and loki write them */}}
{{- define "language.labels" -}}
{{- $labels := list
  (printf "app: %s" .Chart.Name)
  (printf "release: %s" .Release.Name)
-}}
{{- join "\n" $labels -}}
{{- end -}}

{{- define "language.port" -}}
{{- $p := .port | default 8080
-}}
{{ $p }}
{{- end -}}
