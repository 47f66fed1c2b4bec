package fluxkcl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/cli"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// maxDiffAnswer bounds what is read of the artifact server's answer; the server bounds each side
// of a diff by --server-diff-max-size (16 MiB by default).
const maxDiffAnswer = 64 << 20

// diffCommand is `flux kcl diff <name>`: the artifact server's diff between two kept artifacts;
// `flux kcl diff kclartifact` is the local one.
func (a *app) diffCommand() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "diff <name>",
		Short: "Show what changed between two artifacts of a KCLArtifact; diff kclartifact: a local render against the cluster",
		Long: `Show the artifact server's diff between two artifacts a KCLArtifact keeps (flux kcl history):
by default the previous one and the current one. Object by object, keys sorted, each side's health
in comment lines, the values of Secrets and of the KCLArtifact's argumentsFrom Secrets masked.

The artifact server is reached through a port-forward to the controller's leader Pod (it needs
pods/portforward in the controller's namespace), or at the artifact URL when the controller runs
outside the cluster. For a diff of a local checkout against the cluster, see
flux kcl diff kclartifact.`,
		Example: `  # what the last render changed
  flux kcl diff podinfo -n apps

  # between two kept artifacts, by digest or a unique prefix of one
  flux kcl diff podinfo -n apps --from sha256:0a1b2c3d --to sha256:4e5f6a7b`,
		Args:              diffArgs,
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			return a.diffArtifacts(ctx, args[0], from, to)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "digest (or a unique prefix of at least 8 hex digits) of the older artifact; default the previous one")
	cmd.Flags().StringVar(&to, "to", "", "digest (or a unique prefix) of the newer artifact; default the current one")
	cmd.AddCommand(a.diffKCLArtifactCommand())
	return cmd
}

// diffArgs is one name; two arguments are a kind and a name, as in `flux diff kustomization x`,
// and only kclartifact is one.
func diffArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 2 {
		return unknownKind("diff", args[0])
	}
	return cobra.ExactArgs(1)(cmd, args)
}

// unknownKind is the error of `flux kcl build|diff <kind>` for a kind other than kclartifact, as
// a flux user may type `flux kcl build kustomization`.
func unknownKind(verb, kind string) error {
	usage := "flux kcl build kclartifact <name> --path <dir>"
	if verb == "diff" {
		usage = "flux kcl diff <name>, or flux kcl diff kclartifact <name> --path <dir>"
	}
	if kind == "" {
		return fmt.Errorf("give a kind: %s", usage)
	}
	return fmt.Errorf("unknown kind %q: flux kcl %s works on KCLArtifacts: %s", kind, verb, usage)
}

func (a *app) diffArtifacts(ctx context.Context, name, from, to string) error {
	_, obj, err := a.clientAndArtifact(ctx, name)
	if err != nil {
		return err
	}
	q := url.Values{}
	for key, prefix := range map[string]string{"from": from, "to": to} {
		if prefix == "" {
			continue
		}
		entry, err := findEntry(withWaiting(obj), prefix)
		if err != nil {
			return err
		}
		q.Set(key, entry.Digest)
	}
	// the artifact server answers only with the token of the KCLArtifact's artifact URLs
	if obj.Status.Artifact != nil {
		if u, err := url.Parse(obj.Status.Artifact.URL); err == nil && u.Query().Get("token") != "" {
			q.Set("token", u.Query().Get("token"))
		}
	}
	if len(obj.Status.History) < 2 && from == "" {
		return fmt.Errorf("KCLArtifact %s keeps %d artifact(s): there is nothing to compare yet", name, len(obj.Status.History))
	}
	base, done, err := a.artifactServer(ctx, obj)
	if err != nil {
		return err
	}
	defer done()
	u := fmt.Sprintf("%s/kclartifact/%s/%s/diff", base, obj.Namespace, obj.Name)
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return a.copyAnswer(ctx, u)
}

// copyAnswer writes the body of a GET of u to stdout, or returns the server's one-line error.
func (a *app) copyAnswer(ctx context.Context, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("artifact server not reachable: %w", err)
	}
	defer resp.Body.Close()
	body := io.LimitReader(resp.Body, maxDiffAnswer)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(body, 4096))
		return fmt.Errorf("artifact server answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	// the diff quotes rendered objects: their values are the programs'
	out := termsafe.NewWriter(a.stdout)
	if _, err = io.Copy(out, body); err != nil {
		return err
	}
	return out.Flush()
}

// artifactServer is the base URL of the artifact server that serves obj, and a function that
// releases it: through a port-forward to the leader Pod, since the server is in-cluster only
// (and its NetworkPolicy admits only flux-system), or at the artifact's own URL when the
// controller runs outside the cluster.
func (a *app) artifactServer(ctx context.Context, obj *kclv1.KCLArtifact) (string, func(), error) {
	fw, err := a.forwardToLeader(ctx, "artifact server", artifactPort, "127.0.0.1", 0)
	if errors.Is(err, errNoDeployment) {
		return artifactURLBase(obj)
	}
	if err != nil {
		return "", nil, err
	}
	return fw.URL, func() { _ = fw.Close() }, nil
}

// artifactURLBase is scheme://host of obj's artifact URL, which a controller outside the cluster
// advertises at an address of its own machine.
func artifactURLBase(obj *kclv1.KCLArtifact) (string, func(), error) {
	if obj.Status.Artifact == nil {
		return "", nil, fmt.Errorf("KCLArtifact %s has no artifact yet", obj.Name)
	}
	u, err := url.Parse(obj.Status.Artifact.URL)
	if err != nil || u.Host == "" {
		return "", nil, fmt.Errorf("KCLArtifact %s: artifact URL %q: %v", obj.Name, obj.Status.Artifact.URL, err)
	}
	return u.Scheme + "://" + u.Host, func() {}, nil
}

// artifactPort is the manager's container port named http, or the port of its --storage-addr.
func artifactPort(d *appsv1.Deployment) (int, error) {
	c, err := managerContainer(d)
	if err != nil {
		return 0, err
	}
	for _, p := range c.Ports {
		if p.Name == "http" {
			return int(p.ContainerPort), nil
		}
	}
	addr, ok := cli.FlagValue(c.Args, "storage-addr")
	if !ok {
		return 0, fmt.Errorf("the Deployment %s/%s has no container port named http and no --storage-addr", d.Namespace, d.Name)
	}
	return addrPort(addr)
}

// withWaiting is obj with a stage's waiting artifacts after its history: they are compared with
// what runs before approval (and never pinned: pin reads the history alone).
func withWaiting(obj *kclv1.KCLArtifact) *kclv1.KCLArtifact {
	p := obj.Status.Promotion
	if p == nil || len(p.Waiting) == 0 {
		return obj
	}
	c := obj.DeepCopy()
	for _, w := range p.Waiting {
		c.Status.History = append(c.Status.History, w.Entry())
	}
	return c
}
