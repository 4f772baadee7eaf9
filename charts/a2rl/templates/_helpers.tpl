{{- define "a2rl.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "a2rl.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "a2rl.labels" -}}
app.kubernetes.io/name: {{ include "a2rl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: a2rl
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "a2rl.selectorLabels" -}}
app.kubernetes.io/name: {{ include "a2rl.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "a2rl.operatorServiceAccount" -}}
{{- default (printf "%s-operator" (include "a2rl.fullname" .)) .Values.serviceAccount.name -}}
{{- end -}}

{{/*
An image of the chart with `imageRegistry` (when set) in place of its registry: a first path
component with a "." or ":" (or "localhost") is a registry and is replaced; otherwise (a Docker Hub
name) the registry is put in front. Call: include "a2rl.image" (list .Values.imageRegistry REF).
*/}}
{{- define "a2rl.image" -}}
{{- $registry := index . 0 -}}
{{- $ref := index . 1 -}}
{{- if not $registry -}}
{{- $ref -}}
{{- else -}}
{{- $parts := splitList "/" $ref -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- printf "%s/%s" $registry (join "/" (rest $parts)) -}}
{{- else -}}
{{- printf "%s/%s" $registry $ref -}}
{{- end -}}
{{- end -}}
{{- end -}}
