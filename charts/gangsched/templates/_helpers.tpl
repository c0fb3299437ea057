{{/*
The release's full name: the release name when it already contains the chart's name (release
"gangsched" gives objects named gangsched, as manifests/ does), else "<release>-gangsched".
*/}}
{{- define "gangsched.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gangsched.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "gangsched.fullname" .) -}}
{{- end -}}

{{/* The namespace of the leader-election Lease (and of its Role): config.leaseNamespace, or the
release's namespace when that is "". */}}
{{- define "gangsched.leaseNamespace" -}}
{{- .Values.config.leaseNamespace | default .Release.Namespace -}}
{{- end -}}

{{/* The configuration file's settings: config, with leaseNamespace filled in. */}}
{{- define "gangsched.config" -}}
{{- $config := deepCopy .Values.config -}}
{{- $_ := set $config "leaseNamespace" (include "gangsched.leaseNamespace" .) -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The port of config.httpBindAddress: the container port "http". */}}
{{- define "gangsched.httpPort" -}}
{{- $address := .Values.config.httpBindAddress | toString -}}
{{- if not (regexMatch "^[^:]*:[0-9]{1,5}$" $address) -}}
{{- fail (printf "config.httpBindAddress %q: the chart needs host:port (the probes use it)" $address) -}}
{{- end -}}
{{- regexFind "[0-9]+$" $address -}}
{{- end -}}

{{- define "gangsched.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object: manifests/' two, and Helm's. */}}
{{- define "gangsched.labels" -}}
app.kubernetes.io/name: gangsched
app.kubernetes.io/part-of: gangsched
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The scheduler pods' selector. */}}
{{- define "gangsched.selectorLabels" -}}
app.kubernetes.io/name: gangsched
app.kubernetes.io/component: scheduler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
