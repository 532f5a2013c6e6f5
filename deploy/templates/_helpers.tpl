{{/*
The chart's objects are the plain manifests of deploy/ (NN-*.yaml,
per-cluster/, monitoring/), read with .Files.Get and edited as
structures, never copied into templates/: one source, which the tests
read as files and render through the chart.
*/}}

{{/* The image name the plain manifests give every container, without a tag
or digest; the chart pins it to image.repository@image.digest. */}}
{{- define "er.shippedImage" -}}icr.io/armada/etcd-recovery{{- end -}}

{{/*
er.objects: the objects of the plain manifest .file (one fromYaml per YAML
document; comment-only documents are skipped) into .out.objs. A file the
chart does not hold, or a document that is not YAML, fails the render.
*/}}
{{- define "er.objects" -}}
{{- $objs := list -}}
{{- $text := .root.Files.Get .file -}}
{{- if not $text -}}{{- fail (printf "etcd-recovery chart: %s is not in the chart" .file) -}}{{- end -}}
{{- range $doc := regexSplit "(?m)^---[ \\t]*$" $text -1 -}}
{{- $o := fromYaml $doc -}}
{{- if hasKey $o "Error" -}}{{- fail (printf "etcd-recovery chart: %s: %s" $.file (get $o "Error")) -}}{{- end -}}
{{- if $o -}}{{- $objs = append $objs $o -}}{{- end -}}
{{- end -}}
{{- if not $objs -}}{{- fail (printf "etcd-recovery chart: %s holds no object" .file) -}}{{- end -}}
{{- $_ := set .out "objs" $objs -}}
{{- end -}}

{{/*
er.pin: every container of the workload .obj (CronJob, Job, Deployment)
runs .image (repository@digest). A container naming another image fails
the render: the chart pins only the tool's image.
*/}}
{{- define "er.pin" -}}
{{- $o := .obj -}}
{{- $spec := dict -}}
{{- if eq $o.kind "CronJob" -}}
{{- $spec = $o.spec.jobTemplate.spec.template.spec -}}
{{- else if has $o.kind (list "Job" "Deployment" "StatefulSet" "DaemonSet") -}}
{{- $spec = $o.spec.template.spec -}}
{{- end -}}
{{- range $c := concat ($spec.containers | default list) ($spec.initContainers | default list) -}}
{{- if ne $c.image (include "er.shippedImage" $) -}}
{{- fail (printf "etcd-recovery chart: %s %s container %s runs %s, not %s" $o.kind $o.metadata.name $c.name $c.image (include "er.shippedImage" $)) -}}
{{- end -}}
{{- $_ := set $c "image" $.image -}}
{{- end -}}
{{- end -}}

{{/* er.labels: the chart's labels added to .obj's own. */}}
{{- define "er.labels" -}}
{{- $md := .obj.metadata -}}
{{- $labels := $md.labels | default dict -}}
{{- $_ := set $labels "app.kubernetes.io/managed-by" .root.Release.Service -}}
{{- $_ := set $labels "app.kubernetes.io/instance" .root.Release.Name -}}
{{- $_ := set $labels "helm.sh/chart" (printf "%s-%s" .root.Chart.Name .root.Chart.Version) -}}
{{- $_ := set $md "labels" $labels -}}
{{- end -}}

{{/*
er.schedule: .obj's (a CronJob) schedule with .offset minutes added to
its minute field, which must be a plain number (the manifest's base
minute); the sum stays within the hour.
*/}}
{{- define "er.schedule" -}}
{{- $f := splitList " " .obj.spec.schedule -}}
{{- if not (regexMatch "^[0-9]+$" (first $f)) -}}
{{- fail (printf "etcd-recovery chart: CronJob %s: schedule %q: the minute field must be one number to be offset" .obj.metadata.name .obj.spec.schedule) -}}
{{- end -}}
{{- $m := add (atoi (first $f)) .offset -}}
{{- if ge (int $m) 60 -}}
{{- fail (printf "etcd-recovery chart: namespace %s: CronJob %s: minute %s + offset %d is past the hour" .ns .obj.metadata.name (first $f) .offset) -}}
{{- end -}}
{{- $_ := set .obj.spec "schedule" (join " " (prepend (rest $f) (toString $m))) -}}
{{- end -}}

{{/*
er.secondStore: the second site's store URL .store (SCHEME://BUCKET[/PATH][?QUERY])
with the namespace's prefix .prefix appended to its path: each
namespace's copies are under its own prefix on the second site, as on
the primary.
*/}}
{{- define "er.secondStore" -}}
{{- $parts := splitn "?" 2 .store -}}
{{- $url := printf "%s/%s" (trimSuffix "/" $parts._0) .prefix -}}
{{- if $parts._1 }}{{ $url = printf "%s?%s" $url $parts._1 }}{{ end -}}
{{- $url -}}
{{- end -}}
