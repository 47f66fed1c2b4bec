// Package provenance writes the SLSA v1 provenance of a rendered artifact as an in-toto v1
// statement, the payload of the attestation that ociartifact signs and pushes next to the
// artifact's OCI copy.
//
// It records what the render read: the source (kind, URL, revision, artifact digest), the path,
// the arguments, the cluster objects inputs were read from, and the KCL dependencies locked in
// kcl.mod.lock. The source commit belongs here rather than in the artifact's manifest: the
// manifest digest must depend on the rendered output only, and the attestation is a separate
// image that does not change it.
//
// It is plain structs (no in-toto-golang): the statement is a few fixed fields, and the
// project keeps its dependencies few. Nothing here reads Secrets or masks values: the caller
// passes arguments already masked ("***" for a value read from a Secret, as status.history
// records it), and Statement writes them as given. The attestation is readable by anyone who can
// pull the repository.
package provenance
