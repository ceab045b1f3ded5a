{{/*
Names. The release name alone when it contains the chart's name (`helm install mcp-edge …`
gives the names of deploy/base), else <release>-<name>; at most 63 characters, and short
enough for the suffixes -config, -peers, -redis.
*/}}
{{- define "mcp-edge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 56 | trimSuffix "-" }}
{{- end }}

{{- define "mcp-edge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 56 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 56 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 56 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The edge pods: what every selector of the chart matches. */}}
{{- define "mcp-edge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcp-edge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: edge
{{- end }}

{{/* Labels of every object (the selector labels with the component given). */}}
{{- define "mcp-edge.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "mcp-edge.labels" -}}
{{ include "mcp-edge.selectorLabels" . }}
{{ include "mcp-edge.commonLabels" . }}
{{- end }}

{{/* The Redis of redis.deploy. */}}
{{- define "mcp-edge.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "mcp-edge.name" . }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcp-edge.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "mcp-edge.configMapName" -}}
{{- default (printf "%s-config" (include "mcp-edge.fullname" .)) .Values.existingConfigMap }}
{{- end }}

{{/* "true" when a listener serves TLS (the certificate Secret is mounted). */}}
{{- define "mcp-edge.tlsEnabled" -}}
{{- range .Values.listeners }}{{ if .tls }}true{{ end }}{{ end }}
{{- end }}

{{/* The [rate_limits] redis URL: redis.url, or the Redis the chart runs. */}}
{{- define "mcp-edge.redisUrl" -}}
{{- if .Values.redis.url }}
{{- .Values.redis.url }}
{{- else if .Values.redis.deploy.enabled }}
{{- printf "redis://%s-redis:6379/0" (include "mcp-edge.fullname" .) }}
{{- else }}
{{- fail "redis.enabled needs redis.url, or redis.deploy.enabled to run one" }}
{{- end }}
{{- end }}

{{/* The port of the Redis URL (6379 when it names none), for the NetworkPolicy. */}}
{{- define "mcp-edge.redisPort" -}}
{{- $url := include "mcp-edge.redisUrl" . }}
{{- $m := regexFind ":[0-9]+(/|$)" (regexReplaceAll "^[a-z]+://([^@/]*@)?" $url "") }}
{{- if $m }}{{ trimSuffix "/" (trimPrefix ":" $m) }}{{ else }}6379{{ end }}
{{- end }}

{{/* Refuse combinations the schema cannot express, with a message saying what to set. */}}
{{- define "mcp-edge.validate" -}}
{{- if and .Values.tls.certManager.enabled (not .Values.tls.certManager.issuerRef.name) }}
{{- fail "tls.certManager.enabled needs tls.certManager.issuerRef.name (your Issuer or ClusterIssuer)" }}
{{- end }}
{{- if and .Values.tls.certManager.enabled (not (include "mcp-edge.tlsEnabled" .)) }}
{{- fail "tls.certManager.enabled, but no listener has tls: true" }}
{{- end }}
{{- $names := dict }}
{{- range .Values.listeners }}
{{- if or (hasKey $names .name) (has .name (list "admin" "handoff")) }}
{{- fail (printf "listeners: the name %q is used twice (admin and handoff are the chart's)" .name) }}
{{- end }}
{{- $_ := set $names .name true }}
{{- if or (eq (int .port) (int $.Values.ports.admin)) (eq (int .port) (int $.Values.ports.handoff)) }}
{{- fail (printf "listeners: %s's port %d is ports.admin or ports.handoff" .name (int .port)) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
TOML. Helm's toToml writes every number of the values as a float (5000.0, 8.64e+07), which the
edge refuses for its integer keys, so the chart writes TOML itself: whole numbers as integers,
strings as JSON strings (valid TOML basic strings), tables of a table as [a.b] sections and
anything deeper inline. Keys whose value is null are left out.
*/}}
{{- define "mcp-edge.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}

{{- define "mcp-edge.toml.value" -}}
{{- $v := . }}
{{- if kindIs "map" $v }}
{{- $parts := list }}
{{- range $k, $x := $v }}
{{- if not (kindIs "invalid" $x) }}
{{- $parts = append $parts (printf "%s = %s" (include "mcp-edge.toml.key" $k) (include "mcp-edge.toml.value" $x)) }}
{{- end }}
{{- end }}
{{- if $parts }}{ {{ join ", " $parts }} }{{ else }}{}{{ end }}
{{- else if kindIs "slice" $v }}
{{- $parts := list }}
{{- range $x := $v }}
{{- $parts = append $parts (include "mcp-edge.toml.value" $x) }}
{{- end }}
{{- if $parts }}[ {{ join ", " $parts }} ]{{ else }}[]{{ end }}
{{- else if kindIs "string" $v }}
{{- toJson $v }}
{{- else if kindIs "bool" $v }}
{{- $v }}
{{- else if or (kindIs "float64" $v) (kindIs "float32" $v) }}
{{- if eq (float64 $v) (float64 (int64 $v)) }}{{ int64 $v }}{{ else }}{{ $v }}{{ end }}
{{- else if kindIs "invalid" $v }}
{{- fail "a null TOML value in an array" }}
{{- else }}
{{- $v }}
{{- end }}
{{- end }}

{{/* "true" for a non-empty list whose every element is a table: an array of tables [[x]]. */}}
{{- define "mcp-edge.toml.isTableArray" -}}
{{- if and (kindIs "slice" .) (gt (len .) 0) }}
{{- $all := true }}
{{- range . }}{{ if not (kindIs "map" .) }}{{ $all = false }}{{ end }}{{ end }}
{{- if $all }}true{{ end }}
{{- end }}
{{- end }}

{{/* The body of one table: its plain keys, then each table-valued key as [<path>.<key>]. */}}
{{- define "mcp-edge.toml.body" -}}
{{- $path := index . 0 }}
{{- $table := index . 1 }}
{{- range $k, $v := $table }}
{{- if and (not (kindIs "invalid" $v)) (not (kindIs "map" $v)) }}
{{ include "mcp-edge.toml.key" $k }} = {{ include "mcp-edge.toml.value" $v }}
{{- end }}
{{- end }}
{{- range $k, $v := $table }}
{{- if kindIs "map" $v }}
[{{ $path }}.{{ include "mcp-edge.toml.key" $k }}]
{{- range $k2, $v2 := $v }}
{{- if not (kindIs "invalid" $v2) }}
{{ include "mcp-edge.toml.key" $k2 }} = {{ include "mcp-edge.toml.value" $v2 }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/* A whole document: the tables in the order of docs/configuration.md, then any other. */}}
{{- define "mcp-edge.toml.document" -}}
{{- $doc := . }}
{{- $order := list "server" "listeners" "metrics" "fleet" "tracing" "limits" "timeouts" "forwarding" "access_log" "sessions" "identity" "rate_limits" "pools" "routes" "passthrough" }}
{{- $keys := $order }}
{{- range $k, $_ := $doc }}{{ if not (has $k $order) }}{{ $keys = append $keys $k }}{{ end }}{{ end }}
{{- range $k := $keys }}
{{- if hasKey $doc $k }}
{{- $v := index $doc $k }}
{{- if kindIs "map" $v }}
[{{ include "mcp-edge.toml.key" $k }}]
{{- include "mcp-edge.toml.body" (list (include "mcp-edge.toml.key" $k) $v) }}
{{ else if include "mcp-edge.toml.isTableArray" $v }}
{{- range $item := $v }}
[[{{ include "mcp-edge.toml.key" $k }}]]
{{- include "mcp-edge.toml.body" (list (include "mcp-edge.toml.key" $k) $item) }}
{{ end }}
{{- else if not (kindIs "invalid" $v) }}
{{- fail (printf "config.%s: a top-level key of mcp-edge.toml must be a table or an array of tables" $k) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
mcp-edge.toml: `config`, plus what the chart owns because it must agree with the objects it
renders: [[listeners]] (container and Service ports), [metrics] address (the admin port the
probes use), [fleet] dns/handoff_listen/advertise (the peers Service and hand-off port),
[sessions] keys_file (the key Secret's mount), [tracing] and [rate_limits].
*/}}
{{- define "mcp-edge.configToml" -}}
{{- $c := deepCopy (default dict .Values.config) }}
{{- $listeners := list }}
{{- range .Values.listeners }}
{{- $l := deepCopy (default dict .settings) }}
{{- $_ := set $l "address" (printf "0.0.0.0:%d" (int .port)) }}
{{- if .tls }}
{{- $cert := dict "cert" "/etc/mcp-edge/tls/tls.crt" "key" "/etc/mcp-edge/tls/tls.key" }}
{{- $_ := set $l "tls" (dict "certificates" (list $cert) "watch_ms" $.Values.tls.watchMs) }}
{{- end }}
{{- $listeners = append $listeners $l }}
{{- end }}
{{- $_ := set $c "listeners" $listeners }}
{{- $metrics := deepCopy (default dict $c.metrics) }}
{{- $_ := set $metrics "address" (printf "0.0.0.0:%d" (int .Values.ports.admin)) }}
{{- $_ := set $c "metrics" $metrics }}
{{- $handoff := int .Values.ports.handoff }}
{{- $fleet := deepCopy (default dict $c.fleet) }}
{{- $_ := set $fleet "dns" (printf "%s-peers:%d" (include "mcp-edge.fullname" .) $handoff) }}
{{- $_ := set $fleet "handoff_listen" (printf "0.0.0.0:%d" $handoff) }}
{{- $_ := set $fleet "advertise" (printf "${POD_IP}:%d" $handoff) }}
{{- $_ := set $c "fleet" $fleet }}
{{- $sessions := deepCopy (default dict $c.sessions) }}
{{- $_ := set $sessions "keys_file" (printf "/etc/mcp-edge/keys/%s" .Values.sessionKeys.key) }}
{{- $_ := set $c "sessions" $sessions }}
{{- if .Values.tracing.endpoint }}
{{- $tracing := deepCopy (default dict .Values.tracing.settings) }}
{{- $_ := set $tracing "endpoint" .Values.tracing.endpoint }}
{{- $_ := set $c "tracing" $tracing }}
{{- end }}
{{- if .Values.redis.enabled }}
{{- $rl := deepCopy (default dict .Values.redis.settings) }}
{{- $_ := set $rl "redis" (include "mcp-edge.redisUrl" .) }}
{{- if .Values.redis.passwordSecret }}
{{- $_ := set $rl "redis_password_file" "/etc/mcp-edge/redis/password" }}
{{- end }}
{{- $_ := set $c "rate_limits" $rl }}
{{- end }}
{{- include "mcp-edge.toml.document" $c }}
{{- end }}
