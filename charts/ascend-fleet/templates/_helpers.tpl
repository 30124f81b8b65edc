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
The Lease the operator pods elect their acting one with (operator.leaderElection).
*/}}
{{- define "ascend-fleet.leaseName" -}}
{{- default (include "ascend-fleet.fullname" .) .Values.operator.leaderElection.name }}
{{- end }}

{{/*
True (non-empty) when the operator watches only the listed namespaces.
*/}}
{{- define "ascend-fleet.namespaced" -}}
{{- if .Values.operator.watchNamespaces }}true{{ end }}
{{- end }}

{{/*
Where the Prometheus credentials are mounted (one directory per Secret or ConfigMap).
*/}}
{{- define "ascend-fleet.prometheusAuthDir" -}}
/etc/ascend-fleet/prometheus
{{- end }}

{{/*
The Prometheus credentials' volumes and their mounts ("volumes" or "mounts"), from prometheusAuth.
*/}}
{{- define "ascend-fleet.prometheusAuthVolumes" -}}
{{- $auth := .root.Values.prometheusAuth }}
{{- $dir := include "ascend-fleet.prometheusAuthDir" .root }}
{{- if and $auth.bearerToken.secretName $auth.basicAuth.secretName }}
{{- fail "prometheusAuth.bearerToken and prometheusAuth.basicAuth are both set: both are sent in the Authorization header, so only one can be used; keep one" }}
{{- end }}
{{- if and $auth.ca.secretName $auth.ca.configMapName }}
{{- fail "prometheusAuth.ca.secretName and prometheusAuth.ca.configMapName are both set: keep one" }}
{{- end }}
{{- $sources := list }}
{{- with $auth.bearerToken.secretName }}{{ $sources = append $sources (dict "name" "prometheus-bearer" "dir" "bearer" "secret" (dict "secretName" .)) }}{{ end }}
{{- with $auth.basicAuth.secretName }}{{ $sources = append $sources (dict "name" "prometheus-basic" "dir" "basic" "secret" (dict "secretName" .)) }}{{ end }}
{{- with $auth.ca.secretName }}{{ $sources = append $sources (dict "name" "prometheus-ca" "dir" "ca" "secret" (dict "secretName" .)) }}{{ end }}
{{- with $auth.ca.configMapName }}{{ $sources = append $sources (dict "name" "prometheus-ca" "dir" "ca" "configMap" (dict "name" .)) }}{{ end }}
{{- range $sources }}
{{- if eq $.part "volumes" }}
- name: {{ .name }}
  {{- if .secret }}
  secret:
    secretName: {{ .secret.secretName }}
  {{- else }}
  configMap:
    name: {{ .configMap.name }}
  {{- end }}
{{- else }}
- name: {{ .name }}
  mountPath: {{ $dir }}/{{ .dir }}
  readOnly: true
{{- end }}
{{- end }}
{{- end }}

{{/*
The operator's settings file (config.yaml): the `config` values plus the default engine and picker images.
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
{{- if not .Values.rbac.routing }}
{{- $_ := set $settings.routing "enabled" false }}
{{- end }}
{{- if not $settings.routing.pickerImage }}
{{- $picker := .Values.pickerImage }}
{{- $_ := set $settings.routing "pickerImage" (printf "%s:%s" $picker.repository (default .Chart.AppVersion $picker.tag)) }}
{{- end }}
{{- if not .Values.rbac.npuHealth }}
{{- $_ := set $settings.control "npuHealth" false }}
{{- end }}
{{- if $images }}
{{- $_ := set $settings "images" $images }}
{{- end }}
{{- if not $settings.prometheus.url }}
{{- $_ := unset $settings.prometheus "url" }}
{{- end }}
{{- range $key := list "bearerTokenFile" "caFile" "basicAuth" }}
{{- if not (get $settings.prometheus $key) }}
{{- $_ := unset $settings.prometheus $key }}
{{- end }}
{{- end }}
{{- $auth := .Values.prometheusAuth }}
{{- if $auth.bearerToken.secretName }}
{{- $_ := set $settings.prometheus "bearerTokenFile" (printf "%s/bearer/%s" (include "ascend-fleet.prometheusAuthDir" .) $auth.bearerToken.key) }}
{{- end }}
{{- if $auth.basicAuth.secretName }}
{{- $dir := printf "%s/basic" (include "ascend-fleet.prometheusAuthDir" .) }}
{{- $_ := set $settings.prometheus "basicAuth" (dict "usernameFile" (printf "%s/%s" $dir $auth.basicAuth.usernameKey) "passwordFile" (printf "%s/%s" $dir $auth.basicAuth.passwordKey)) }}
{{- end }}
{{- if or $auth.ca.secretName $auth.ca.configMapName }}
{{- $_ := set $settings.prometheus "caFile" (printf "%s/ca/%s" (include "ascend-fleet.prometheusAuthDir" .) $auth.ca.key) }}
{{- end }}
{{- toYaml $settings }}
{{- end }}
