{{/*
The chart name, or nameOverride.
*/}}
{{- define "indexed-batch-job.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every resource name: the release name, followed by the chart
name unless the release name already contains it. A release named
indexed-batch-job therefore gets the names config/default uses.
*/}}
{{- define "indexed-batch-job.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "indexed-batch-job.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "indexed-batch-job.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Labels that select the manager pods (and the metrics Service).
*/}}
{{- define "indexed-batch-job.selectorLabels" -}}
control-plane: controller-manager
app.kubernetes.io/name: {{ include "indexed-batch-job.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The manager's ServiceAccount.
*/}}
{{- define "indexed-batch-job.serviceAccountName" -}}
{{ include "indexed-batch-job.fullname" . }}-controller-manager
{{- end }}

{{/*
Whether the metrics endpoint is served with authentication and authorization.
*/}}
{{- define "indexed-batch-job.secureMetrics" -}}
{{- if and .Values.metrics.enabled .Values.metrics.secure }}true{{ end }}
{{- end }}

{{/*
The metrics Service; a Service name is a DNS label, at most 63 characters.
*/}}
{{- define "indexed-batch-job.metricsServiceName" -}}
{{- printf "%s-controller-manager-metrics-service" (include "indexed-batch-job.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The webhook configurations, Service and certificate Secret.
*/}}
{{- define "indexed-batch-job.validatingWebhookName" -}}
{{ include "indexed-batch-job.fullname" . }}-validating-webhook-configuration
{{- end }}
{{- define "indexed-batch-job.mutatingWebhookName" -}}
{{ include "indexed-batch-job.fullname" . }}-mutating-webhook-configuration
{{- end }}
{{- define "indexed-batch-job.webhookServiceName" -}}
{{- printf "%s-webhook-service" (include "indexed-batch-job.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "indexed-batch-job.webhookSecretName" -}}
{{ include "indexed-batch-job.fullname" . }}-webhook-server-cert
{{- end }}
{{- define "indexed-batch-job.certManager" -}}
{{- if and .Values.webhook.enabled (eq .Values.webhook.certManagement "certManager") }}true{{ end }}
{{- end }}
