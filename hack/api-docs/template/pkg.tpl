{{/* Flux's template (fluxcd/kustomize-controller hack/api-docs, Apache-2.0), retitled. */}}
{{ define "packages" }}
    <h1>KCL API reference
        {{- with (index .packages 0) -}}
            {{ with (index .GoPackages 0 ) -}}
                {{ printf " %s" .Name -}}
            {{ end -}}
        {{ end }}</h1>

    <p>Generated from the Go types of <code>api/v1alpha1</code> by <code>make api-docs</code>: do not edit.
    What each field does, with examples, is in the <a href="../../spec/v1alpha1/kclartifacts.md">KCLArtifacts</a> page.</p>

    {{ with .packages}}
        <p>Packages:</p>
        <ul class="simple">
            {{ range . }}
                <li>
                    <a href="#{{- packageAnchorID . -}}">{{ packageDisplayName . }}</a>
                </li>
            {{ end }}
        </ul>
    {{ end}}

    {{ range .packages }}
        <h2 id="{{- packageAnchorID . -}}">
            {{- packageDisplayName . -}}
        </h2>

        {{ with (index .GoPackages 0 )}}
            {{ with .DocComments }}
                {{ safe (renderComments .) }}
            {{ end }}
        {{ end }}

        Resource Types:

        <ul class="simple">
            {{- range (visibleTypes (sortedTypes .Types)) -}}
                {{ if isExportedType . -}}
                    <li>
                        <a href="{{ linkForType . }}">{{ typeDisplayName . }}</a>
                    </li>
                {{- end }}
            {{- end -}}
        </ul>

        {{ range (visibleTypes (sortedTypes .Types))}}
            {{ template "type" .  }}
        {{ end }}
    {{ end }}

    <div class="admonition note">
        <p class="last">This page was automatically generated with <code>gen-crd-api-reference-docs</code></p>
    </div>
{{ end }}
