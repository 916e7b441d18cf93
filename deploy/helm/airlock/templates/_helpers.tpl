{{/*
Names. The StatefulSet is called <fullname>, so its pods are
<fullname>-0, <fullname>-1, ...: the first part of every session id, and
what the router's one rule matches.
*/}}
{{- define "airlock.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The headless Service that gives every pod its DNS name. */}}
{{- define "airlock.podsService" -}}
{{- printf "%s-pods" (include "airlock.fullname" .) -}}
{{- end -}}

{{- define "airlock.routerName" -}}
{{- printf "%s-router" (include "airlock.fullname" .) -}}
{{- end -}}

{{- define "airlock.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "airlock.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "airlock.routerSelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: router
{{- end -}}

{{- define "airlock.image" -}}
{{- $img := .image -}}
{{- printf "%s:%s" $img.repository (default .chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* The Secret holding the API token, "" without one. */}}
{{- define "airlock.secretName" -}}
{{- if .Values.auth.existingSecret -}}
{{- .Values.auth.existingSecret -}}
{{- else if .Values.auth.token -}}
{{- include "airlock.fullname" . -}}
{{- end -}}
{{- end -}}

{{/* Where files the chart hands to airlock are mounted. */}}
{{- define "airlock.secretDir" -}}/etc/airlock/secret{{- end -}}
{{- define "airlock.storeDir" -}}/etc/airlock/store{{- end -}}
{{- define "airlock.podInfoDir" -}}/etc/airlock/pod{{- end -}}

{{/*
airlock's configuration file: the chart's keys, then .Values.config over
them (a key set in both is an error, so that nothing the routing relies on
is overridden by accident).
*/}}
{{- define "airlock.config" -}}
{{- $chart := dict
  "state_dir" "/run/airlock"
  "lock_dir" "/run/airlock/locks"
  "cache_dir" "/var/cache/airlock"
  "data_dir" "/var/lib/airlock"
  "server" (dict "listen" (printf "0.0.0.0:%d" (int .Values.service.port)))
  "cluster" (dict "pod_name_file" (printf "%s/name" (include "airlock.podInfoDir" .)))
-}}
{{- if include "airlock.secretName" . -}}
{{- $_ := set $chart.server "token_file" (printf "%s/token" (include "airlock.secretDir" .)) -}}
{{- end -}}
{{- with .Values.store.postgres.dsnSecret -}}
{{- $_ := set $chart "store" (dict "driver" "postgres" "dsn_file" (printf "%s/dsn" (include "airlock.storeDir" $)) "lease_timeout" $.Values.store.postgres.leaseTimeout) -}}
{{- end -}}
{{- if and (kindIs "map" .Values.config.store) (or (hasKey .Values.config.store "dsn") (hasKey .Values.config.store "dsn_file")) -}}
{{- fail "config.store.dsn: the connection string is a secret; set store.postgres.dsnSecret (a Secret), never the ConfigMap" -}}
{{- end -}}
{{- if .Values.persistence.enabled -}}
{{- $_ := set $chart "persistence" (dict "enabled" true "on_shutdown" "pause" "shutdown_timeout" (printf "%ds" (int .Values.persistence.shutdownTimeoutSeconds))) -}}
{{- end -}}
{{- if .Values.isolation.gvisor -}}
{{- $_ := set $chart "isolation" "gvisor" -}}
{{- end -}}
{{- if eq .Values.isolation.profile "userns" -}}
{{- $_ := set $chart "id_base" (int .Values.userns.idBase) -}}
{{- $_ := set $chart "id_count" (int .Values.userns.idCount) -}}
{{- end -}}
{{- range $k, $v := .Values.config -}}
{{- if and (hasKey $chart $k) (not (kindIs "map" $v)) -}}
{{- fail (printf "config.%s is set by the chart" $k) -}}
{{- end -}}
{{- if kindIs "map" $v -}}
{{- range $kk, $vv := $v -}}
{{- if and (hasKey $chart $k) (hasKey (get $chart $k) $kk) -}}
{{- fail (printf "config.%s.%s is set by the chart" $k $kk) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- mustMergeOverwrite (deepCopy .Values.config) $chart | toPrettyJson -}}
{{- end -}}
