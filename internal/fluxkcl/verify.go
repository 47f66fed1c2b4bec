package fluxkcl

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
	"github.com/kcl-flux/kcl-artifact-controller/internal/provenance"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

func (a *app) verifyCommand() *cobra.Command {
	var key, output string
	var insecure bool
	cmd := &cobra.Command{
		Use:   "verify <name> [<digest>]",
		Short: "Check the signature of a pushed artifact and print its provenance",
		Long: `Check, in the registry, the cosign signature and the SLSA provenance of an artifact that
spec.publish.oci pushed (the current one, or the history entry of <digest>: an artifact digest or
its OCI digest, a unique prefix is enough), with the public key, and print the provenance: the
source, its revision and digest, the path, the arguments (values read from Secrets as ***), the
engine and the controller that rendered it.

Besides the signature, verify checks that the signed payload names this manifest digest and this
repository, and that the provenance's subject is this digest: a signature copied from another
artifact (which an OCIRepository's cosign verification of source-controller v1.9 accepts) is
refused here. The key is --key, a PEM file, else cosign.pub of the Secret spec.publish.oci.sign
names. Registry credentials come from your docker config, as for docker and flux pull.`,
		Example: `  flux kcl verify podinfo -n apps --key cosign.pub
  flux kcl verify podinfo sha256:1234abcd -n apps -o json`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "text", "json"); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			return a.verify(ctx, args, key, output, insecure)
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "the cosign public key, a PEM file (default: cosign.pub of the Secret spec.publish.oci.sign.secretRef names)")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "reach the registry over plain HTTP (default: spec.publish.oci.insecure)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text, or json: the provenance statement as signed")
	return cmd
}

// verify checks the entry args name and prints what its provenance says.
func (a *app) verify(ctx context.Context, args []string, keyFile, output string, insecure bool) error {
	c, obj, err := a.clientAndArtifact(ctx, args[0])
	if err != nil {
		return err
	}
	entry, err := pushedEntry(obj, args[1:])
	if err != nil {
		return err
	}
	rec := entry.OCI
	v, err := a.publicKey(ctx, c, obj, keyFile)
	if err != nil {
		return err
	}
	if keyFile == "" {
		a.log.Warningf("the public key is cosign.pub of the namespace's own Secret: anyone who may write that Secret chooses it; give --key to check with a key you hold")
	}
	if p := obj.Spec.Publish; p != nil && p.OCI != nil && p.OCI.Insecure {
		insecure = true
	}
	var nopts []name.Option
	if insecure {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.NewDigest(strings.TrimPrefix(rec.URL, "oci://")+"@"+rec.Digest, nopts...)
	if err != nil {
		return fmt.Errorf("history names an invalid OCI reference: %w", err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	verified, err := ociartifact.Verify(ref, v, opts...)
	if err != nil {
		return err // it names the reference
	}
	// status says which push is this entry's: the signed image must be the entry's artifact
	if err := sameArtifact(ref, entry.Digest, opts); err != nil {
		return err
	}
	if output == "json" {
		// valid JSON may still carry C1 controls raw: the statement came from a registry
		_, err := io.WriteString(a.stdout, termsafe.Text(string(verified.Statement))+"\n")
		return err
	}
	b, err := provenance.Read(verified.Statement)
	if err != nil {
		return err
	}
	return printProvenance(a.stdout, ref, b)
}

// sameArtifact checks the image at ref is the artifact of digest: its one layer is that tarball.
func sameArtifact(ref name.Digest, digest string, opts []remote.Option) error {
	img, err := remote.Image(ref, opts...)
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("%s: %w", ref, err)
	}
	if len(m.Layers) != 1 || m.Layers[0].Digest.String() != digest {
		return fmt.Errorf("%s is signed, but it is not artifact %s of the history: its layers are other bytes", ref, digest)
	}
	return nil
}

// pushedEntry is the entry of digest (an artifact or OCI digest, or a unique prefix), the
// current artifact's without one, if it was pushed.
func pushedEntry(obj *kclv1.KCLArtifact, digest []string) (kclv1.ArtifactHistoryEntry, error) {
	if len(obj.Status.History) == 0 {
		return kclv1.ArtifactHistoryEntry{}, fmt.Errorf("%s/%s has published no artifact", obj.Namespace, obj.Name)
	}
	entry := obj.Status.History[0]
	if len(digest) > 0 {
		var err error
		if entry, err = matchEntry(obj, digest[0], true); err != nil {
			return entry, err
		}
	}
	if entry.OCI == nil {
		return entry, fmt.Errorf("%s/%s: artifact %s was not pushed (spec.publish.oci; flux kcl get says why)", obj.Namespace, obj.Name, entry.Digest)
	}
	return entry, nil
}

// publicKey reads --key, else cosign.pub of the signing Secret.
func (a *app) publicKey(ctx context.Context, c client.Client, obj *kclv1.KCLArtifact, keyFile string) (signature.Verifier, error) {
	var pem []byte
	switch {
	case keyFile != "":
		f, err := os.Open(keyFile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if pem, err = io.ReadAll(io.LimitReader(f, 64<<10)); err != nil {
			return nil, err
		}
	case obj.Spec.Publish != nil && obj.Spec.Publish.OCI != nil && obj.Spec.Publish.OCI.Sign != nil:
		var s corev1.Secret
		key := client.ObjectKey{Namespace: obj.Namespace, Name: obj.Spec.Publish.OCI.Sign.SecretRef.Name}
		if err := c.Get(ctx, key, &s); err != nil {
			return nil, fmt.Errorf("reading the public key cosign.pub of Secret %s (or give --key): %w", key, clusterError(err))
		}
		if pem = s.Data["cosign.pub"]; pem == nil {
			return nil, fmt.Errorf("Secret %s has no cosign.pub: give the public key with --key", key)
		}
	default:
		return nil, fmt.Errorf("%s/%s signs nothing (spec.publish.oci.sign): give the public key with --key", obj.Namespace, obj.Name)
	}
	return ociartifact.LoadVerifier(pem)
}

// printProvenance prints what made the artifact.
func printProvenance(w io.Writer, ref name.Digest, b provenance.Build) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Verified %s: signed with the key, for this digest and repository\n", ref)
	fmt.Fprintf(&sb, "Provenance (%s):\n", provenance.PredicateType)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&sb, "  %-13s %s\n", k+":", v)
		}
	}
	line("source", strings.TrimSpace(b.SourceKind+" "+b.SourceURL))
	line("revision", b.SourceRevision)
	line("source digest", b.SourceDigest)
	line("path", b.Path)
	keys := make([]string, 0, len(b.Arguments))
	for k := range b.Arguments {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		line("argument", k+"="+b.Arguments[k])
	}
	for _, in := range b.Inputs {
		line("input", in.Name+" from "+in.From)
	}
	for _, d := range b.Dependencies {
		line("dependency", strings.TrimSpace(d.Name+" "+d.Version+" "+d.Source+" "+d.Sum))
	}
	if !b.DependenciesRecorded {
		line("dependency", "not recorded (pushed after a restart of the controller that rendered it)")
	}
	line("engine", b.Engine)
	line("built by", strings.TrimSpace(b.Controller+" "+b.ControllerVersion))
	if !b.FinishedOn.IsZero() {
		line("published", b.FinishedOn.UTC().Format("2006-01-02T15:04:05Z"))
	}
	_, err := io.WriteString(w, termsafe.Text(sb.String()))
	return err
}
