{{/*
Chart name, truncated to 63 characters (the limit of a label value and of most object names).
*/}}
{{- define "ascend-fleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: <release>-<chart>, or just <release> when it already contains the chart name.
*/}}
{{- define "ascend-fleet.fullname" -}}
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
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "ascend-fleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "ascend-fleet.labels" -}}
helm.sh/chart: {{ include "ascend-fleet.chart" . }}
{{ include "ascend-fleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ascend-fleet
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels that select the operator pods (stable across upgrades: never add a changing value here).
*/}}
{{- define "ascend-fleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ascend-fleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
The operator's ServiceAccount name.
*/}}
{{- define "ascend-fleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ascend-fleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Operator image: repository:tag, or repository@digest when a digest pins it. The tag defaults to appVersion.
*/}}
{{- define "ascend-fleet.image" -}}
{{- $image := .Values.operator.image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/*
Name of kopf's peering object.
*/}}
{{- define "ascend-fleet.peeringName" -}}
{{- default (include "ascend-fleet.fullname" .) .Values.operator.peering.name }}
{{- end }}

{{/*
True (non-empty) when the operator watches only the listed namespaces.
*/}}
{{- define "ascend-fleet.namespaced" -}}
{{- if .Values.watchNamespaces }}true{{ end }}
{{- end }}

{{/*
The operator's settings file (config.yaml): the `config` values plus the default engine images.
Its keys are exactly those of the operator's settings schema; a chart test validates the rendered file.
*/}}
{{- define "ascend-fleet.settings" -}}
{{- $images := dict }}
{{- range $engine, $image := .Values.engineImages }}
{{- if $image.repository }}
{{- $_ := set $images $engine (printf "%s:%s" $image.repository (default (printf "%s%s" $.Chart.AppVersion (default "" $image.suffix)) $image.tag)) }}
{{- end }}
{{- end }}
{{- $settings := deepCopy .Values.config }}
{{- if $images }}
{{- $_ := set $settings "images" $images }}
{{- end }}
{{- if not $settings.prometheus.url }}
{{- $_ := unset $settings.prometheus "url" }}
{{- end }}
{{- toYaml $settings }}
{{- end }}
