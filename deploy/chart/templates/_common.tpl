{{/* The agent's name: its Deployment, ServiceAccount, Roles and Lease. */}}
{{- define "pallet.fullname" -}}
{{- default "pallet-agent" .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object: deploy/'s, and helm's. */}}
{{- define "pallet.labels" -}}
app.kubernetes.io/name: {{ include "pallet.fullname" . }}
app.kubernetes.io/part-of: pallet
{{ include "pallet.helmLabels" . }}
{{- end -}}

{{/* The labels helm charts carry. */}}
{{- define "pallet.helmLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The agent Pods' labels, and its selector. */}}
{{- define "pallet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pallet.fullname" . }}
{{- end -}}

{{/* The image reference: by digest when one is given. */}}
{{- define "pallet.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}
