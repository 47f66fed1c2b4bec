{{/* Flux's template (fluxcd/kustomize-controller hack/api-docs, Apache-2.0), with the field's
     validation markers (default, enum, bounds) shown under its description. */}}
{{ define "members" }}
    {{ range .Members }}
        {{ if not (hiddenMember .)}}
            <tr>
                <td>
                    <code>{{ fieldName . }}</code><br>
                    <em>
                        {{ if linkForType .Type }}
                            <a href="{{ linkForType .Type }}">
                                {{ typeDisplayName .Type }}
                            </a>
                        {{ else }}
                            {{ typeDisplayName .Type }}
                        {{ end }}
                    </em>
                </td>
                <td>
                    {{ if fieldEmbedded . }}
                        <p>
                            (Members of <code>{{ fieldName . }}</code> are embedded into this type.)
                        </p>
                    {{ end}}

                    {{ if isOptionalMember .}}
                        <em>(Optional)</em>
                    {{ end }}

                    {{ safe (renderComments .CommentLines) }}

                    {{ template "markers" .CommentLines }}

                    {{ if and (eq (.Type.Name.Name) "ObjectMeta") }}
                        Refer to the Kubernetes API documentation for the fields of the
                        <code>metadata</code> field.
                    {{ end }}

                    {{ if or (eq (fieldName .) "spec") }}
                        <br/>
                        <br/>
                        <table>
                            {{ template "members" .Type }}
                        </table>
                    {{ end }}
                </td>
            </tr>
        {{ end }}
    {{ end }}
{{ end }}

{{/* The kubebuilder markers of a field's comment lines that a reader needs. */}}
{{ define "markers" }}
    {{ range . }}
        {{ if and (gt (len .) 21) (eq (slice . 0 21) "+kubebuilder:default=") }}
            <p>Default: <code>{{ slice . 21 }}</code></p>
        {{ else if and (gt (len .) 29) (eq (slice . 0 29) "+kubebuilder:validation:Enum=") }}
            <p>Enum: <code>{{ slice . 29 }}</code></p>
        {{ else if and (gt (len .) 32) (eq (slice . 0 32) "+kubebuilder:validation:Minimum=") }}
            <p>Minimum: <code>{{ slice . 32 }}</code></p>
        {{ else if and (gt (len .) 32) (eq (slice . 0 32) "+kubebuilder:validation:Maximum=") }}
            <p>Maximum: <code>{{ slice . 32 }}</code></p>
        {{ else if and (gt (len .) 34) (eq (slice . 0 34) "+kubebuilder:validation:MinLength=") }}
            <p>Minimum length: <code>{{ slice . 34 }}</code></p>
        {{ else if and (gt (len .) 34) (eq (slice . 0 34) "+kubebuilder:validation:MaxLength=") }}
            <p>Maximum length: <code>{{ slice . 34 }}</code></p>
        {{ else if and (gt (len .) 33) (eq (slice . 0 33) "+kubebuilder:validation:MinItems=") }}
            <p>Minimum items: <code>{{ slice . 33 }}</code></p>
        {{ else if and (gt (len .) 33) (eq (slice . 0 33) "+kubebuilder:validation:MaxItems=") }}
            <p>Maximum items: <code>{{ slice . 33 }}</code></p>
        {{ end }}
    {{ end }}
{{ end }}
