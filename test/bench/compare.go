package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/yamldiff"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// The comparison mode (--compare) feeds the same rendered objects for N applications through
// plain Flux and through this controller, in one run, each with one GitRepository per namespace,
// in one or both shapes (--shapes):
//
//   - per-app: one Kustomization (plain) or KCLArtifact (kcl) per application;
//   - grouped: one per namespace, standing for all of the namespace's applications.
//
// Plain: the repository of a namespace holds apps/<app>/manifests.yaml, the YAML the KCL program
// renders for that application; each Kustomization applies its application's path, or, grouped,
// the whole apps/ tree. KCL: the repository holds main.k, rendering one application from its
// arguments, or, grouped, every application of the namespace; each KCLArtifact is applied by its
// generated Kustomization.
//
// Each phase runs until everything is applied (or handled), then checks every object in the
// cluster, and reports the wall time, the CPU of every component and the kube-apiserver's requests
// and writes; the table prints the kcl/plain ratio of each, per shape. The phases: create; a commit
// that changes every application; the sparse commits, which change 1 and then 10 applications of
// the first namespace's repository (the commit most users make), each until every unit of that
// repository has handled the revision and the changed applications are applied; and a requested
// no-op reconcile.

const (
	compareSource = "apps"
	shapePerApp   = "per-app"
	shapeGrouped  = "grouped"
)

// shapeTitles name the shapes in the table.
var shapeTitles = map[string]string{shapePerApp: "per app", shapeGrouped: "grouped"}

// pipeline is one side of the comparison in one shape.
type pipeline struct {
	shape      string
	name       string // plain or kcl
	namespaces []string
	apps       []types.NamespacedName
	replicas   map[types.NamespacedName]int
	// units are the Kustomizations of plain Flux, the KCLArtifacts of kcl: one per application,
	// or, grouped, one per namespace
	units   []types.NamespacedName
	version int
	// versions are the applications whose version is not version: those a sparse commit changed
	versions map[types.NamespacedName]int
	revs     map[string]string // namespace → the revision everything must reach
	token    string            // the reconcile request of the no-op phase
}

// cmpResult is the measure of one phase of one pipeline.
type cmpResult struct {
	wall     time.Duration
	cpu      map[string]time.Duration // component → CPU
	requests float64                  // kube-apiserver requests
	writes   float64                  // of which writes: create, update, patch, delete
	units    int
}

// cmpPhase is a phase of the comparison: what it does, and how the table names it.
type cmpPhase struct {
	name  string
	label string // the table's first cell
	wall  string // what the wall time runs to
	run   func(*pipeline) (time.Time, error)
	// poll is how often completion is read: the sparse commits are over in seconds.
	poll time.Duration
	noop bool
}

// sparseCounts are the applications the sparse commits change, in turn.
var sparseCounts = []int{1, 10}

func (b *bench) cmpPhases() []cmpPhase {
	out := []cmpPhase{
		{name: "create", label: "create", wall: "wall to all applied", run: b.cmpCreate, poll: b.cfg.poll},
		{name: "commit", label: "commit", wall: "wall to all applied", run: b.cmpCommit, poll: b.cfg.poll},
	}
	for _, k := range sparseCounts {
		out = append(out, cmpPhase{name: fmt.Sprintf("commit %d", k),
			label: fmt.Sprintf("commit of %d of %s", k, thousands(float64(b.cfg.n))),
			wall:  "wall to all handled, the changed applied", run: b.cmpSparse(k), poll: min(b.cfg.poll, sparsePoll)})
	}
	return append(out, cmpPhase{name: "no-op", label: "no-op", wall: "wall to all handled", run: b.cmpNoop, poll: b.cfg.poll, noop: true})
}

// sparsePoll is the completion poll of the sparse commits, whose wall time is a few seconds.
const sparsePoll = 200 * time.Millisecond

// cmpResults are the results by shape, pipeline and phase.
type cmpResults map[string]map[string]map[string]cmpResult

func (b *bench) runCompare() error {
	results := cmpResults{}
	var costs string
	for _, shape := range b.cfg.shapes {
		results[shape] = map[string]map[string]cmpResult{}
		for _, name := range []string{"plain", "kcl"} {
			p := b.newPipeline(shape, name)
			r, err := b.runPipeline(p)
			if err != nil {
				return fmt.Errorf("%s / %s: %w", shape, name, err)
			}
			results[shape][name] = r
			if shape == shapePerApp && name == "kcl" {
				if costs, err = b.measureWriteCosts(p); err != nil {
					return fmt.Errorf("write costs: %w", err)
				}
			}
		}
	}
	table := compareTable(b.cfg.shapes, b.cmpPhases(), results, b.cfg.n, b.cfg.namespaces)
	if costs != "" {
		table += "\n" + costs
	}
	fmt.Print("\n" + table + "\n" + b.describeRun())
	out := strings.TrimSuffix(b.cfg.out, ".md") + "-compare.md"
	if err := os.WriteFile(out, []byte(table+"\n"+b.describeRun()), 0o644); err != nil {
		return err
	}
	logf("bench-scale: comparison written to %s", out)
	return nil
}

func (b *bench) newPipeline(shape, name string) *pipeline {
	p := &pipeline{shape: shape, name: name, revs: map[string]string{}, replicas: map[types.NamespacedName]int{}, version: 1,
		versions: map[types.NamespacedName]int{}}
	for i := range b.cfg.namespaces {
		p.namespaces = append(p.namespaces, fmt.Sprintf("%s-%s-%02d", shape, name, i))
		if shape == shapeGrouped {
			p.units = append(p.units, types.NamespacedName{Namespace: p.namespaces[i], Name: compareSource})
		}
	}
	for i := range b.cfg.n {
		key := types.NamespacedName{Namespace: p.namespaces[i%len(p.namespaces)], Name: fmt.Sprintf("app-%04d", i)}
		p.apps = append(p.apps, key)
		p.replicas[key] = i%5 + 1
	}
	if shape == shapePerApp {
		p.units = p.apps
	}
	return p
}

func (p *pipeline) grouped() bool { return p.shape == shapeGrouped }

// appsOf are the applications a unit stands for.
func (p *pipeline) appsOf(u types.NamespacedName) []types.NamespacedName {
	if !p.grouped() {
		return []types.NamespacedName{u}
	}
	return p.appsIn(u.Namespace)
}

func (p *pipeline) appsIn(ns string) []types.NamespacedName {
	var out []types.NamespacedName
	for _, app := range p.apps {
		if app.Namespace == ns {
			out = append(out, app)
		}
	}
	return out
}

// path is the directory of the namespace's repository a plain Kustomization applies.
func (p *pipeline) path(u types.NamespacedName) string {
	if p.grouped() {
		return "./apps"
	}
	return "./apps/" + u.Name
}

// arguments are a KCLArtifact's arguments to its repository's main.k.
func (p *pipeline) arguments(u types.NamespacedName) map[string]string {
	if p.grouped() {
		return map[string]string{"namespace": u.Namespace}
	}
	return map[string]string{"name": u.Name, "namespace": u.Namespace, "replicas": strconv.Itoa(p.replicas[u])}
}

// versionOf is the version an application is at.
func (p *pipeline) versionOf(app types.NamespacedName) string {
	if v, ok := p.versions[app]; ok {
		return strconv.Itoa(v)
	}
	return strconv.Itoa(p.version)
}

// mainK is the KCL program of a namespace's repository.
func (p *pipeline) mainK(ns string) string {
	if !p.grouped() {
		own := map[string]string{}
		for app := range p.versions {
			if app.Namespace == ns {
				own[app.Name] = p.versionOf(app)
			}
		}
		return programWith(strconv.Itoa(p.version), own)
	}
	var apps []groupApp
	for _, app := range p.appsIn(ns) {
		apps = append(apps, groupApp{name: app.Name, replicas: p.replicas[app], version: p.versionOf(app)})
	}
	return groupProgram(apps)
}

// plainYAML is the YAML plain Flux applies for a unit.
func (p *pipeline) plainYAML(u types.NamespacedName) string {
	var docs []string
	for _, app := range p.appsOf(u) {
		docs = append(docs, rendered(app.Name, app.Namespace, p.replicas[app], p.versionOf(app)))
	}
	return strings.Join(docs, "---\n")
}

func (b *bench) runPipeline(p *pipeline) (map[string]cmpResult, error) {
	logf("== compare / %s / %s: %d applications over %d namespaces, %d units", p.shape, p.name, len(p.apps), len(p.namespaces), len(p.units))
	if err := b.setupPipeline(p); err != nil {
		return nil, err
	}
	b.settle("before " + p.shape + " " + p.name)
	out := map[string]cmpResult{}
	for _, phase := range b.cmpPhases() {
		start := b.cmpMark()
		t0, err := phase.run(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", phase.name, err)
		}
		done, err := b.cmpWait(p, phase)
		if err != nil {
			return nil, err
		}
		end := b.cmpMark()
		if err := b.verifyApplied(p); err != nil {
			return nil, fmt.Errorf("%s: %w", phase.name, err)
		}
		r := cmpResult{wall: done.Sub(t0), cpu: map[string]time.Duration{}, requests: end.requests - start.requests,
			writes: end.writes - start.writes, units: len(p.units)}
		for k, v := range end.cpu {
			// idle during plain Flux, which does not have it
			if p.name == "kcl" || (k != "kcl-artifact-controller" && k != "kcl workers") {
				r.cpu[k] = v - start.cpu[k]
			}
		}
		out[phase.name] = r
		logf("   %s / %s / %s: wall %s, CPU %s, API requests %.0f (writes %.0f)", p.shape, p.name, phase.name, fmtDur(r.wall), cpuString(r.cpu), r.requests, r.writes)
		b.settle("after " + p.shape + " " + p.name + " " + phase.name)
	}
	return out, nil
}

// setupPipeline creates the namespaces, their repositories and GitRepositories.
func (b *bench) setupPipeline(p *pipeline) error {
	for _, ns := range p.namespaces {
		if err := b.c.Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return err
		}
		dir, err := os.MkdirTemp("", "bench-compare-")
		if err != nil {
			return err
		}
		err = writeTree(dir, p.repoFiles(ns))
		var sha string
		if err == nil {
			sha, err = b.env.Git.CreateRepo(ns, dir)
		}
		os.RemoveAll(dir)
		if err != nil {
			return err
		}
		p.revs[ns] = gitRevision(sha)
		gr := &sourcev1.GitRepository{
			ObjectMeta: metav1.ObjectMeta{Name: compareSource, Namespace: ns},
			Spec: sourcev1.GitRepositorySpec{URL: b.env.Git.URL(ns), Interval: metav1.Duration{Duration: time.Hour},
				Timeout: &metav1.Duration{Duration: time.Minute}, Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch}},
		}
		if err := b.c.Create(b.ctx, gr); err != nil {
			return err
		}
	}
	if p.name == "plain" {
		if err := b.checkSameObjects(p); err != nil {
			return err
		}
	}
	_, err := b.waitSources(p)
	return err
}

// repoFiles is a namespace's repository: main.k for kcl, the YAML of every application for plain
// Flux.
func (p *pipeline) repoFiles(ns string) map[string]string {
	if p.name == "kcl" {
		return map[string]string{"main.k": p.mainK(ns)}
	}
	files := map[string]string{}
	for _, app := range p.appsIn(ns) {
		files["apps/"+app.Name+"/manifests.yaml"] = rendered(app.Name, ns, p.replicas[app], p.versionOf(app))
	}
	return files
}

// rendered is what program renders for one application, written out for plain Flux.
func rendered(name, ns string, replicas int, version string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: %[1]s-config
  namespace: %[2]s
  labels:
    app.kubernetes.io/name: %[1]s
    app.kubernetes.io/part-of: bench-scale
data:
  name: %[1]s
  replicas: "%[3]d"
  version: "%[4]s"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
  namespace: %[2]s
  labels:
    app.kubernetes.io/name: %[1]s
    app.kubernetes.io/part-of: bench-scale
spec:
  replicas: %[3]d
  selector:
    matchLabels:
      app.kubernetes.io/name: %[1]s
  template:
    metadata:
      labels:
        app.kubernetes.io/name: %[1]s
    spec:
      containers:
      - name: app
        image: nginx:1.27
        env:
        - name: VERSION
          value: "%[4]s"
`, name, ns, replicas, version)
}

// checkSameObjects renders one unit (an application, or a namespace's applications when grouped)
// with the controller binary and checks that the objects plain Flux gets for it are the same.
func (b *bench) checkSameObjects(p *pipeline) error {
	dir, err := os.MkdirTemp("", "bench-compare-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	u := p.units[min(1, len(p.units)-1)]
	if err := os.WriteFile(filepath.Join(dir, "main.k"), []byte(p.mainK(u.Namespace)), 0o644); err != nil {
		return err
	}
	args := []string{"render", "main.k"}
	for k, v := range p.arguments(u) {
		args = append(args, "-D", k+"="+v)
	}
	cmd := exec.CommandContext(b.ctx, b.binary, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("rendering %s: %w", u, err)
	}
	kcl, err := manifests.Parse(out, 0)
	if err != nil {
		return err
	}
	plain, err := manifests.Parse([]byte(p.plainYAML(u)), 0)
	if err != nil {
		return err
	}
	res, err := yamldiff.Objects(kcl, plain, yamldiff.Options{})
	if err != nil {
		return err
	}
	if len(res.Objects) > 0 {
		return fmt.Errorf("plain Flux would not get what the KCL program renders:\n%s", res.String())
	}
	return nil
}

func writeTree(dir string, files map[string]string) error {
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// waitSources waits until every GitRepository of the pipeline has its expected revision.
func (b *bench) waitSources(p *pipeline) (time.Time, error) {
	return b.poll(p.name+" GitRepositories", b.cfg.poll, b.cfg.timeout, func(ctx context.Context) (bool, string, error) {
		n := 0
		for _, ns := range p.namespaces {
			var gr sourcev1.GitRepository
			if err := b.watched.Get(ctx, client.ObjectKey{Namespace: ns, Name: compareSource}, &gr); err == nil &&
				gr.Status.Artifact != nil && gr.Status.Artifact.Revision == p.revs[ns] {
				n++
			}
		}
		return n == len(p.namespaces), fmt.Sprintf("%d/%d at their revision", n, len(p.namespaces)), nil
	})
}

// cmpCreate creates the units: plain Kustomizations of their path, or KCLArtifacts with their
// arguments and generated Kustomizations.
func (b *bench) cmpCreate(p *pipeline) (time.Time, error) {
	t0 := time.Now()
	hour := metav1.Duration{Duration: time.Hour}
	return t0, b.parallel(len(p.units), func(i int) error {
		u := p.units[i]
		om := metav1.ObjectMeta{Name: u.Name, Namespace: u.Namespace}
		if p.name == "plain" {
			return b.c.Create(b.ctx, &kustomizev1.Kustomization{ObjectMeta: om,
				Spec: kustomizev1.KustomizationSpec{
					SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: compareSource},
					Path:      p.path(u), Interval: hour, Prune: true,
				},
			})
		}
		return b.c.Create(b.ctx, &kclv1.KCLArtifact{ObjectMeta: om,
			Spec: kclv1.KCLArtifactSpec{
				SourceRef: kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: compareSource},
				Interval:  hour, RetryInterval: &metav1.Duration{Duration: 10 * time.Second},
				Arguments: p.arguments(u), Kustomization: &kclv1.KustomizationTemplate{Interval: &hour},
			},
		})
	})
}

// cmpCommit changes every application in every repository and asks source-controller to fetch.
func (b *bench) cmpCommit(p *pipeline) (time.Time, error) {
	t0 := time.Now()
	p.version++
	clear(p.versions)
	return t0, b.cmpPush(p, p.namespaces, fmt.Sprintf("version %d", p.version))
}

// cmpSparse is a commit that changes k applications, all in the first namespace's repository,
// the next k after those the last sparse commit changed; the other applications of the repository
// stay as they were, and the other repositories get no commit.
func (b *bench) cmpSparse(k int) func(p *pipeline) (time.Time, error) {
	return func(p *pipeline) (time.Time, error) {
		t0 := time.Now()
		apps := p.appsIn(p.namespaces[0])
		start := len(p.versions) % len(apps)
		for i := range min(k, len(apps)) {
			app := apps[(start+i)%len(apps)]
			p.versions[app] = p.version + 1
		}
		return t0, b.cmpPush(p, p.namespaces[:1], fmt.Sprintf("%d applications to version %d", k, p.version+1))
	}
}

// cmpPush commits the namespaces' repositories as repoFiles has them and asks source-controller
// to fetch.
func (b *bench) cmpPush(p *pipeline, namespaces []string, message string) error {
	for _, ns := range namespaces {
		sha, err := b.env.Git.CommitFiles(ns, message, p.repoFiles(ns))
		if err != nil {
			return err
		}
		p.revs[ns] = gitRevision(sha)
		if err := b.requestReconcile(&sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: compareSource, Namespace: ns}}); err != nil {
			return err
		}
	}
	return nil
}

// cmpNoop asks everything the user owns to reconcile with nothing changed: the Kustomizations of
// plain Flux; the KCLArtifacts and their generated Kustomizations (both reconcile at their
// interval in a cluster).
func (b *bench) cmpNoop(p *pipeline) (time.Time, error) {
	p.token = "bench-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	t0 := time.Now()
	return t0, b.parallel(len(p.units), func(i int) error {
		om := metav1.ObjectMeta{Name: p.units[i].Name, Namespace: p.units[i].Namespace}
		if err := b.annotate(&kustomizev1.Kustomization{ObjectMeta: om}, p.token); err != nil {
			return err
		}
		if p.name == "kcl" {
			return b.annotate(&kclv1.KCLArtifact{ObjectMeta: om}, p.token)
		}
		return nil
	})
}

// cmpWait waits until the phase is over for every unit: applied at the expected revision, or, for
// the no-op, the reconcile request handled.
func (b *bench) cmpWait(p *pipeline, phase cmpPhase) (time.Time, error) {
	return b.poll(p.shape+" / "+p.name+" / "+phase.name, phase.poll, b.cfg.timeout, func(ctx context.Context) (bool, string, error) {
		n := 0
		for _, u := range p.units {
			var ks kustomizev1.Kustomization
			if err := b.watched.Get(ctx, u, &ks); err != nil {
				continue
			}
			if b.cmpDone(ctx, p, phase.noop, &ks) {
				n++
			}
		}
		return n == len(p.units), fmt.Sprintf("%d/%d done", n, len(p.units)), nil
	})
}

func (b *bench) cmpDone(ctx context.Context, p *pipeline, noop bool, ks *kustomizev1.Kustomization) bool {
	if noop {
		if ks.Status.LastHandledReconcileAt != p.token {
			return false
		}
		if p.name == "plain" {
			return true
		}
		var o kclv1.KCLArtifact
		return b.watched.Get(ctx, client.ObjectKeyFromObject(ks), &o) == nil && o.Status.LastHandledReconcileAt == p.token
	}
	if p.name == "plain" {
		return ks.Status.LastAppliedRevision == p.revs[ks.Namespace]
	}
	var o kclv1.KCLArtifact
	if b.watched.Get(ctx, client.ObjectKeyFromObject(ks), &o) != nil || o.Status.Artifact == nil {
		return false
	}
	return o.Status.SourceRevision == p.revs[ks.Namespace] && ks.Status.LastAppliedRevision == o.Status.Artifact.Revision
}

// verifyApplied checks, after the measure, what the Kustomizations' status claims: every
// application's ConfigMap and Deployment are in the cluster at the pipeline's version.
func (b *bench) verifyApplied(p *pipeline) error {
	found := map[types.NamespacedName]int{} // application → its objects at its version
	for _, ns := range p.namespaces {
		sel := []client.ListOption{client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/part-of": "bench-scale"}}
		var cms corev1.ConfigMapList
		var deps appsv1.DeploymentList
		if err := b.c.List(b.ctx, &cms, sel...); err != nil {
			return err
		}
		if err := b.c.List(b.ctx, &deps, sel...); err != nil {
			return err
		}
		for _, cm := range cms.Items {
			if app := (types.NamespacedName{Namespace: ns, Name: cm.Data["name"]}); cm.Data["version"] == p.versionOf(app) {
				found[app]++
			}
		}
		for _, d := range deps.Items {
			app := types.NamespacedName{Namespace: ns, Name: d.Name}
			if c := d.Spec.Template.Spec.Containers; len(c) == 1 && len(c[0].Env) == 1 && c[0].Env[0].Value == p.versionOf(app) {
				found[app]++
			}
		}
	}
	var missing []string
	for _, app := range p.apps {
		if found[app] != 2 {
			missing = append(missing, app.String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of %d applications lack their ConfigMap or Deployment at their version (%d, or as a sparse commit set it), e.g. %s",
			len(missing), len(p.apps), p.version, strings.Join(missing[:min(3, len(missing))], ", "))
	}
	logf("   %s / %s: all %d applications' objects at their version (%d; %d changed since)", p.shape, p.name, len(p.apps), p.version, len(p.versions))
	return nil
}

// cmpMarkT is the CPU of every component and the kube-apiserver's request count at one moment.
type cmpMarkT struct {
	cpu              map[string]time.Duration
	requests, writes float64
}

func (b *bench) cmpMark() cmpMarkT {
	m := cmpMarkT{cpu: map[string]time.Duration{}}
	snap, err := b.smp.snapshot()
	if err == nil {
		m.cpu["kcl-artifact-controller"] = ticksToDuration(snap.ctrl.CPU())
		m.cpu["kcl workers"] = ticksToDuration(workerTicks(cpuSnap{}, snap))
	}
	for k, v := range otherCPU(b.others) {
		if k != "harness" {
			m.cpu[k] = ticksToDuration(v)
		}
	}
	m.requests, m.writes = b.apiserverRequests()
	return m
}

// writeVerbs are the verbs of apiserver_request_total that write (APPLY: server-side apply).
var writeVerbs = []string{`verb="POST"`, `verb="PUT"`, `verb="PATCH"`, `verb="APPLY"`, `verb="DELETE"`, `verb="DELETECOLLECTION"`}

// apiserverRequests is the kube-apiserver's apiserver_request_total, summed, and its writes.
func (b *bench) apiserverRequests() (total, writes float64) {
	cs, err := kubernetes.NewForConfig(b.env.Config)
	if err != nil {
		return 0, 0
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(b.ctx)
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			continue
		}
		total += v
		if slices.ContainsFunc(writeVerbs, func(verb string) bool { return strings.Contains(line, verb) }) {
			writes += v
		}
	}
	return total, writes
}

func cpuString(cpu map[string]time.Duration) string {
	var parts []string
	for _, k := range components {
		parts = append(parts, fmt.Sprintf("%s %.1fs", k, cpu[k].Seconds()))
	}
	return strings.Join(parts, ", ")
}

// components are the processes whose CPU the comparison reports, in the table's order.
var components = []string{"kube-apiserver", "etcd", "source-controller", "kustomize-controller",
	"kcl-artifact-controller", "kcl workers"}

// compareTable is the table of docs/benchmarks.md, to be pasted there: per phase the wall time, the
// CPU of the components, this controller's share and kube-apiserver's requests; for each shape,
// plain Flux, KCLArtifacts and their ratio.
func compareTable(shapes []string, phases []cmpPhase, r cmpResults, n, namespaces int) string {
	header := []string{"phase", "figure"}
	for _, s := range shapes {
		prefix := ""
		if len(shapes) > 1 {
			prefix = shapeTitles[s] + ": "
		}
		header = append(header, prefix+"plain Flux", prefix+"KCLArtifacts", "KCL / plain")
	}
	var rows [][]string
	for pi, phase := range phases {
		for fi, f := range cmpFigures {
			row := []string{"", f.name}
			if fi == 0 {
				row = []string{phase.label, phase.wall}
			}
			for _, s := range shapes {
				row = append(row, f.cells(r[s]["plain"][phase.name], r[s]["kcl"][phase.name], pi == 0)...)
			}
			rows = append(rows, row)
		}
	}
	intro := fmt.Sprintf("%s applications (a ConfigMap and a Deployment each) over %d namespaces, one GitRepository per namespace",
		thousands(float64(n)), namespaces)
	if slices.Contains(shapes, shapePerApp) {
		intro += "; per app: a Kustomization or a KCLArtifact per application"
	}
	if slices.Contains(shapes, shapeGrouped) {
		intro += fmt.Sprintf("; grouped: one per namespace, of %d applications", (n+namespaces-1)/namespaces)
	}
	return intro + ":\n\n" + docsTable(header, rows, 2)
}

// cmpFigure is a row of the comparison: its cells for plain Flux, KCLArtifacts and the ratio.
type cmpFigure struct {
	name  string
	cells func(p, k cmpResult, first bool) []string
}

var cmpFigures = []cmpFigure{
	{"wall", func(p, k cmpResult, _ bool) []string {
		return []string{secs(p.wall), secs(k.wall), ratio(float64(p.wall), float64(k.wall))}
	}},
	{"CPU kube-apiserver / etcd", cpuPair("kube-apiserver", "etcd")},
	{"CPU source-controller / kustomize-controller", cpuPair("source-controller", "kustomize-controller")},
	{"CPU this controller + workers", func(_, k cmpResult, first bool) []string {
		own, workers := k.cpu["kcl-artifact-controller"], k.cpu["kcl workers"]
		share := fmt.Sprintf("%.1f %%", 100*float64(own+workers)/float64(max(cpuTotal(k), 1)))
		if first {
			share += " of the total"
		}
		return []string{"—", secs(own) + " + " + secs(workers) + " (" + share + ")", ""}
	}},
	{"CPU total", func(p, k cmpResult, _ bool) []string {
		return []string{secs(cpuTotal(p)), secs(cpuTotal(k)), ratio(float64(cpuTotal(p)), float64(cpuTotal(k)))}
	}},
	{"kube-apiserver requests", func(p, k cmpResult, _ bool) []string {
		return []string{thousands(p.requests), thousands(k.requests), ratio(p.requests, k.requests)}
	}},
	{"kube-apiserver writes (per unit)", func(p, k cmpResult, _ bool) []string {
		return []string{perUnit(p), perUnit(k), ratio(p.writes, k.writes)}
	}},
}

// perUnit is a phase's writes and their count per unit (a Kustomization or KCLArtifact).
func perUnit(r cmpResult) string {
	return fmt.Sprintf("%s (%.1f)", thousands(r.writes), r.writes/float64(max(r.units, 1)))
}

// cpuPair is the figure of two components' CPU, as "a / b".
func cpuPair(a, b string) func(p, k cmpResult, _ bool) []string {
	return func(p, k cmpResult, _ bool) []string {
		return []string{secs(p.cpu[a]) + " / " + secs(p.cpu[b]), secs(k.cpu[a]) + " / " + secs(k.cpu[b]),
			ratio(float64(p.cpu[a]), float64(k.cpu[a])) + " / " + ratio(float64(p.cpu[b]), float64(k.cpu[b]))}
	}
}

func cpuTotal(r cmpResult) time.Duration {
	var t time.Duration
	for _, c := range components {
		t += r.cpu[c]
	}
	return t
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func ratio(plain, kcl float64) string {
	if plain == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", kcl/plain)
}

// thousands writes a count as docs/benchmarks.md does: 18,085.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
