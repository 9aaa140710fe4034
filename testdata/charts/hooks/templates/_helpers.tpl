{{- define "hooks.job" -}}
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .root.Release.Name }}-{{ .name }}
  labels:
    app.kubernetes.io/instance: {{ .root.Release.Name }}
  annotations:
    helm.sh/hook: {{ .events }}
    helm.sh/hook-weight: {{ .weight | quote }}
    {{- with .policy }}
    helm.sh/hook-delete-policy: {{ . }}
    {{- end }}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels:
        app.kubernetes.io/instance: {{ .root.Release.Name }}
    spec:
      restartPolicy: Never
      containers:
      - name: {{ .name }}
        image: {{ .image }}
        env:
        - name: MESSAGE
          value: {{ .root.Values.message | quote }}
{{- end -}}
