package rendercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/normalize"
	"github.com/fluxcd/pkg/ssa/utils"
	flag "github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fluxbuild"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
	"github.com/kcl-flux/kcl-artifact-controller/internal/yamldiff"
)

// Exit codes of render --diff, as diff(1) and flux diff use them.
const (
	exitSame    = 0
	exitDiffers = 1
	exitError   = 2
)

const (
	// requestTimeout bounds each API request when the kubeconfig does not: without it an
	// unresponsive server would hang the command instead of failing it.
	requestTimeout = 30 * time.Second
	lastApplied    = "kubectl.kubernetes.io/last-applied-configuration"
)

// diffOptions are flux diff's: objects kustomize-controller leaves alone are not compared.
var diffOptions = ssa.DiffOptions{Exclusions: map[string]string{fluxbuild.OwnerGroup + "/reconcile": "disabled"}}

// diffFlags are the flags of render --diff.
type diffFlags struct {
	enabled      bool
	kubeconfig   string
	context      string
	namespace    string
	showSecrets  bool
	fieldManager string
	// from is the other checkout of an offline diff: a directory or a Git revision.
	from string
	// markdown prints a pull-request comment instead of a unified diff.
	markdown bool
}

// setFormat reads --output, which with a diff names its format.
func (d *diffFlags) setFormat(output string) error {
	switch output {
	case "", "unified":
	case "markdown":
		d.markdown = true
	default:
		return fmt.Errorf("with --diff or --diff-from, --output is the format of the differences: unified or markdown, not %q", output)
	}
	return nil
}

func addDiffFlags(fs *flag.FlagSet, d *diffFlags) {
	fs.BoolVar(&d.enabled, "diff", false, "compare the rendered objects with the live cluster by server-side dry-run apply, "+
		"as flux diff kustomization does; exit 0: no difference, 1: differences, 2: error")
	fs.StringVar(&d.kubeconfig, "kubeconfig", "", "kubeconfig of --diff and --kclartifact (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&d.context, "context", "", "kubeconfig context of --diff and --kclartifact (default: the current context)")
	fs.StringVar(&d.namespace, "namespace", "", "with --diff, the namespace of namespaced objects that have none "+
		"(default: the context's, else default)")
	fs.BoolVar(&d.showSecrets, "show-secrets", false, "with --diff, show the values of Secrets instead of masking them")
	fs.StringVar(&d.fieldManager, "field-manager", "kustomize-controller",
		"field manager of the --diff dry-run: the one that applies the objects, Flux's kustomize-controller")
	fs.StringVar(&d.from, "diff-from", "", "compare with the render of another checkout, without a cluster: a directory "+
		"(standing for the current one) or a Git revision of the repository of the current directory; exit codes as --diff")
}

// runDiff renders, compares with the cluster or another checkout and prints the differences; it
// returns the exit code. Whatever could be compared is printed even when other objects failed.
func runDiff(f flags, stdout, stderr io.Writer) int {
	var res *yamldiff.Result
	var err error
	if f.diff.from != "" {
		res, err = diffOffline(context.Background(), f, stderr)
	} else {
		res, err = diffLive(context.Background(), f, stderr)
	}
	if res != nil {
		// a diff is read by a human (a terminal, a pull-request comment); its values are the
		// programs': no control reaches the reader raw
		if _, werr := io.WriteString(stdout, termsafe.Text(report(*res, f.diff.markdown))); werr != nil && err == nil {
			err = werr
		}
	}
	switch {
	case err != nil:
		fmt.Fprintln(stderr, "Error:", err)
		return exitError
	case len(res.Objects) > 0:
		return exitDiffers
	}
	return exitSame
}

// report is the diff as printed: unified, or Markdown for a pull request.
func report(res yamldiff.Result, markdown bool) string {
	if markdown {
		return res.Markdown()
	}
	if len(res.Objects) == 0 {
		return fmt.Sprintf("# no changes (%d unchanged)\n", res.Unchanged)
	}
	return res.String()
}

func diffLive(ctx context.Context, f flags, stderr io.Writer) (*yamldiff.Result, error) {
	// The cluster comes first: an unreachable one fails the command before a long render.
	cl, err := connect(f.diff, stderr)
	if err != nil {
		return nil, err
	}
	var objs, pruned []*unstructured.Unstructured
	if f.fromKCLArtifact() {
		objs, pruned, err = cl.kclArtifactObjects(ctx, f, stderr)
	} else {
		objs, err = renderObjects(ctx, f, stderr)
	}
	if err != nil {
		return nil, err
	}
	if err := cl.prepare(objs); err != nil {
		return nil, err
	}
	live, merged, diffErr := cl.compareAll(ctx, objs)
	res, err := yamldiff.Objects(append(live, pruned...), merged, yamldiff.Options{ShowSecrets: f.diff.showSecrets,
		Sensitive: f.secrets.all()})
	if err != nil {
		return nil, err
	}
	return &res, diffErr
}

// renderObjects renders as plain render does and parses the output as the controller does.
func renderObjects(ctx context.Context, f flags, log io.Writer) ([]*unstructured.Unstructured, error) {
	eng, cleanup, err := f.engine(ctx)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	res, err := render.Render(ctx, eng, f.opts)
	if err != nil {
		return nil, f.shown(err)
	}
	// What the program prints goes to stderr: stdout is the diff.
	if _, err := io.WriteString(log, res.Log); err != nil {
		return nil, err
	}
	objs, err := manifests.Parse([]byte(res.Output), 0)
	if err != nil {
		return nil, err
	}
	return applied(objs, phases.Phase(f.phase))
}

// applied keeps the objects the controller would apply: not those of hooks it does not run, and
// with a phase given, only that phase's.
func applied(objs []*unstructured.Unstructured, only phases.Phase) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		p, skip, err := phases.Of(o.GetAnnotations())
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		if !skip && (only == "" || p == only) {
			out = append(out, o)
		}
	}
	return out, nil
}

// cluster is the live cluster render --diff compares with.
type cluster struct {
	client       client.Client
	namespace    string // given to namespaced objects without one
	fieldManager string
	showSecrets  bool
}

func connect(d diffFlags, stderr io.Writer) (*cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = d.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: d.context}
	overrides.Context.Namespace = d.namespace
	kc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := kc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := kc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = requestTimeout
	}
	// Two requests an object: client-go's default of 5 a second would make big outputs crawl.
	cfg.QPS, cfg.Burst = 50, 100
	// Deprecation and other warnings of the API server go to stderr, as kubectl prints them.
	cfg.WarningHandler = rest.NewWarningWriter(stderr, rest.WarningWriterOptions{Deduplicate: true})
	if err := reachable(cfg); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: diffScheme()})
	if err != nil {
		return nil, err
	}
	return &cluster{client: c, namespace: ns, fieldManager: d.fieldManager, showSecrets: d.showSecrets}, nil
}

// diffScheme has the kinds --kclartifact reads besides Kubernetes' own.
func diffScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(kclv1.AddToScheme(s))
	utilruntime.Must(kustomizev1.AddToScheme(s))
	return s
}

// reachable asks the server its version, so that a wrong or dead cluster is one clear error
// rather than a failure for every object.
func reachable(cfg *rest.Config) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err == nil {
		_, err = dc.ServerVersion()
	}
	if err != nil {
		return fmt.Errorf("cannot reach the cluster at %s: %w", cfg.Host, err)
	}
	return nil
}

// prepare makes the objects what kustomize-controller would apply: namespaced objects without a
// namespace get the default one (the REST mapper tells which kinds are namespaced), native kinds
// are normalized as ssa does before applying (e.g. a Secret's stringData moves to data), and
// objects are sorted in apply order, namespaces first.
func (c *cluster) prepare(objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		namespaced, err := c.client.IsObjectNamespaced(o)
		if err != nil {
			return mappingError(o, err)
		}
		if namespaced && o.GetNamespace() == "" {
			o.SetNamespace(c.namespace)
		}
	}
	if err := normalize.UnstructuredList(objs); err != nil {
		return err
	}
	sort.Sort(ssa.SortableUnstructureds(objs))
	return nil
}

// mappingError names the object whose kind could not be looked up; for a kind the cluster
// does not serve, the mapper's own message is a list of discovery failures, not that.
func mappingError(o *unstructured.Unstructured, err error) error {
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%s: the cluster does not serve kind %s in %s (is its CRD installed?)",
			utils.FmtUnstructured(o), o.GetKind(), o.GetAPIVersion())
	}
	return fmt.Errorf("%s (%s): %w", utils.FmtUnstructured(o), o.GetAPIVersion(), err)
}

// compareAll dry-runs every object and returns the live objects and the objects as the apply
// would leave them, for yamldiff. An unchanged object is on both sides, an added one only on
// the merged side. Like flux diff it goes on after an error, to show every difference.
func (c *cluster) compareAll(ctx context.Context, objs []*unstructured.Unstructured) (
	live, merged []*unstructured.Unstructured, err error) {
	mgr := ssa.NewResourceManager(c.client, nil, ssa.Owner{Field: c.fieldManager, Group: fluxbuild.OwnerGroup})
	newNamespaces := map[string]bool{}
	var errs []error
	for _, o := range objs {
		l, m, err := c.compare(ctx, mgr, o, newNamespaces)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if l != nil {
			live = append(live, l)
		}
		merged = append(merged, m)
	}
	return live, merged, errors.Join(errs...)
}

// compare diffs one object with ssa's Diff, as flux diff does. It returns a nil live object for
// an object that does not exist yet. newNamespaces collects the rendered namespaces that do not
// exist: the objects in them cannot be dry-run, and are added.
func (c *cluster) compare(ctx context.Context, mgr *ssa.ResourceManager, o *unstructured.Unstructured,
	newNamespaces map[string]bool) (live, merged *unstructured.Unstructured, err error) {
	entry, l, m, err := mgr.Diff(ctx, o, diffOptions)
	switch {
	case err != nil && newNamespaces[o.GetNamespace()] && apierrors.IsNotFound(err):
		return nil, strip(o), nil
	case err != nil:
		return nil, nil, err
	case entry.Action == ssa.CreatedAction:
		if utils.IsNamespace(o) {
			newNamespaces[o.GetName()] = true
		}
		return nil, strip(o), nil
	case entry.Action != ssa.ConfiguredAction:
		// Unchanged, or skipped as kustomize-controller would skip it.
		s := strip(o)
		return s, s, nil
	case c.showSecrets && utils.IsSecret(o):
		// Diff masks the values of the Secrets it returns: ask again for them.
		return c.unmasked(ctx, o)
	}
	return strip(l), strip(m), nil
}

// unmasked returns a Secret as it is live and as the apply would leave it, values included, with
// the same dry-run as ssa's Diff.
func (c *cluster) unmasked(ctx context.Context, o *unstructured.Unstructured) (
	live, merged *unstructured.Unstructured, err error) {
	l := &unstructured.Unstructured{}
	l.SetGroupVersionKind(o.GroupVersionKind())
	if err := c.client.Get(ctx, client.ObjectKeyFromObject(o), l); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", utils.FmtUnstructured(o), err)
	}
	m := o.DeepCopy()
	err = c.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(m),
		client.DryRunAll, client.ForceOwnership, client.FieldOwner(c.fieldManager))
	if err != nil {
		return nil, nil, fmt.Errorf("%s dry-run failed: %w", utils.FmtUnstructured(o), err)
	}
	return strip(l), strip(m), nil
}

// noisyMetadata is written by the server alone, so it differs between the live object and the
// dry-run, or between the dry-run and the rendered object, without being a change to apply.
var noisyMetadata = []string{"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation"}

// strip returns a copy of o without the fields that are noise in a diff. flux diff does the same
// through ssa: Diff drops managedFields, and decides whether an object drifted from its labels,
// annotations and everything but metadata and status. So the server's metadata and status go
// from both sides, and kubectl's last-applied annotation, a copy of the whole object.
func strip(o *unstructured.Unstructured) *unstructured.Unstructured {
	s := o.DeepCopy()
	for _, f := range noisyMetadata {
		unstructured.RemoveNestedField(s.Object, "metadata", f)
	}
	unstructured.RemoveNestedField(s.Object, "status")
	unstructured.RemoveNestedField(s.Object, "metadata", "annotations", lastApplied)
	if len(s.GetAnnotations()) == 0 {
		unstructured.RemoveNestedField(s.Object, "metadata", "annotations")
	}
	return s
}
