package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
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
// plain Flux and through this controller, in one run, each with one GitRepository per namespace:
//
//   - plain: the repository of a namespace holds apps/<app>/manifests.yaml, the YAML the KCL
//     program renders for that application, and one Kustomization per application applies its path;
//   - kcl: the repository holds main.k, and one KCLArtifact per application renders it, applied by
//     its generated Kustomization.
//
// Each phase (create, commit, no-op) runs until everything is applied (or handled) and reports the
// wall time, the CPU of every component and the kube-apiserver's requests; the table prints the
// kcl/plain ratio of each.

const compareSource = "apps"

// pipeline is one side of the comparison.
type pipeline struct {
	name       string // plain or kcl
	namespaces []string
	apps       []types.NamespacedName
	replicas   map[types.NamespacedName]int
	version    int
	revs       map[string]string // namespace → the revision everything must reach
	token      string            // the reconcile request of the no-op phase
}

// cmpResult is the measure of one phase of one pipeline.
type cmpResult struct {
	wall     time.Duration
	cpu      map[string]time.Duration // component → CPU
	requests float64                  // kube-apiserver requests
}

func (b *bench) runCompare() error {
	results := map[string]map[string]cmpResult{}
	for i, name := range []string{"plain", "kcl"} {
		p := b.newPipeline(i+1, name)
		r, err := b.runPipeline(p)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		results[name] = r
	}
	table := compareTable(results, b.cfg.n, b.cfg.namespaces)
	fmt.Print("\n" + table + "\n" + b.describeRun())
	out := strings.TrimSuffix(b.cfg.out, ".md") + "-compare.md"
	if err := os.WriteFile(out, []byte(table+"\n"+b.describeRun()), 0o644); err != nil {
		return err
	}
	logf("bench-scale: comparison written to %s", out)
	return nil
}

func (b *bench) newPipeline(idx int, name string) *pipeline {
	p := &pipeline{name: name, revs: map[string]string{}, replicas: map[types.NamespacedName]int{}, version: 1}
	for i := range b.cfg.namespaces {
		p.namespaces = append(p.namespaces, fmt.Sprintf("cmp%d-%s-%02d", idx, name, i))
	}
	for i := range b.cfg.n {
		key := types.NamespacedName{Namespace: p.namespaces[i%len(p.namespaces)], Name: fmt.Sprintf("app-%04d", i)}
		p.apps = append(p.apps, key)
		p.replicas[key] = i%5 + 1
	}
	return p
}

func (b *bench) runPipeline(p *pipeline) (map[string]cmpResult, error) {
	logf("== compare / %s: %d applications over %d namespaces", p.name, len(p.apps), len(p.namespaces))
	if err := b.setupPipeline(p); err != nil {
		return nil, err
	}
	b.settle("before " + p.name)
	out := map[string]cmpResult{}
	for _, phase := range []struct {
		name string
		run  func(*pipeline) (time.Time, error)
	}{{"create", b.cmpCreate}, {"commit", b.cmpCommit}, {"no-op", b.cmpNoop}} {
		start := b.cmpMark()
		t0, err := phase.run(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", phase.name, err)
		}
		done, err := b.cmpWait(p, phase.name)
		if err != nil {
			return nil, err
		}
		end := b.cmpMark()
		r := cmpResult{wall: done.Sub(t0), cpu: map[string]time.Duration{}, requests: end.requests - start.requests}
		for k, v := range end.cpu {
			// idle during plain Flux, which does not have it
			if p.name == "kcl" || (k != "kcl-artifact-controller" && k != "kcl workers") {
				r.cpu[k] = v - start.cpu[k]
			}
		}
		out[phase.name] = r
		logf("   %s / %s: wall %s, CPU %s, API requests %.0f", p.name, phase.name, fmtDur(r.wall), cpuString(r.cpu), r.requests)
		b.settle("after " + p.name + " " + phase.name)
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
		files, err := b.repoFiles(p, ns)
		if err == nil {
			err = writeTree(dir, files)
		}
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

// repoFiles is a namespace's repository at p.version.
func (b *bench) repoFiles(p *pipeline, ns string) (map[string]string, error) {
	v := strconv.Itoa(p.version)
	if p.name == "kcl" {
		return map[string]string{"main.k": program(v)}, nil
	}
	files := map[string]string{}
	for _, app := range p.apps {
		if app.Namespace == ns {
			files["apps/"+app.Name+"/manifests.yaml"] = rendered(app.Name, ns, p.replicas[app], v)
		}
	}
	return files, nil
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

// checkSameObjects renders one application with the controller binary and checks that the
// objects plain Flux gets are the same.
func (b *bench) checkSameObjects(p *pipeline) error {
	dir, err := os.MkdirTemp("", "bench-compare-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.k"), []byte(program("1")), 0o644); err != nil {
		return err
	}
	app := p.apps[1]
	cmd := exec.CommandContext(b.ctx, b.binary, "render", "main.k", "-D", "name="+app.Name, "-D", "namespace="+app.Namespace,
		"-D", "replicas="+strconv.Itoa(p.replicas[app]))
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("rendering %s: %w", app, err)
	}
	kcl, err := manifests.Parse(out, 0)
	if err != nil {
		return err
	}
	plain, err := manifests.Parse([]byte(rendered(app.Name, app.Namespace, p.replicas[app], "1")), 0)
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

func (b *bench) cmpCreate(p *pipeline) (time.Time, error) {
	t0 := time.Now()
	return t0, b.parallel(len(p.apps), func(i int) error {
		app := p.apps[i]
		if p.name == "plain" {
			return b.c.Create(b.ctx, &kustomizev1.Kustomization{
				ObjectMeta: metav1.ObjectMeta{Name: app.Name, Namespace: app.Namespace},
				Spec: kustomizev1.KustomizationSpec{
					SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: compareSource},
					Path:      "./apps/" + app.Name, Interval: metav1.Duration{Duration: time.Hour}, Prune: true,
				},
			})
		}
		hour := metav1.Duration{Duration: time.Hour}
		return b.c.Create(b.ctx, &kclv1.KCLArtifact{
			ObjectMeta: metav1.ObjectMeta{Name: app.Name, Namespace: app.Namespace},
			Spec: kclv1.KCLArtifactSpec{
				SourceRef: kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: compareSource},
				Interval:  hour, RetryInterval: &metav1.Duration{Duration: 10 * time.Second},
				Arguments: map[string]string{"name": app.Name, "namespace": app.Namespace,
					"replicas": strconv.Itoa(p.replicas[app])},
				Kustomization: &kclv1.KustomizationTemplate{Interval: &hour},
			},
		})
	})
}

// cmpCommit changes every application in every repository and asks source-controller to fetch.
func (b *bench) cmpCommit(p *pipeline) (time.Time, error) {
	t0 := time.Now()
	p.version++
	for _, ns := range p.namespaces {
		files, err := b.repoFiles(p, ns)
		if err != nil {
			return t0, err
		}
		sha, err := b.env.Git.CommitFiles(ns, fmt.Sprintf("version %d", p.version), files)
		if err != nil {
			return t0, err
		}
		p.revs[ns] = gitRevision(sha)
		if err := b.requestReconcile(&sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: compareSource, Namespace: ns}}); err != nil {
			return t0, err
		}
	}
	return t0, nil
}

// cmpNoop asks everything the user owns to reconcile with nothing changed: the Kustomizations of
// plain Flux; the KCLArtifacts and their generated Kustomizations (both reconcile at their
// interval in a cluster).
func (b *bench) cmpNoop(p *pipeline) (time.Time, error) {
	p.token = "bench-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	t0 := time.Now()
	return t0, b.parallel(len(p.apps), func(i int) error {
		app := p.apps[i]
		om := metav1.ObjectMeta{Name: app.Name, Namespace: app.Namespace}
		if err := b.annotate(&kustomizev1.Kustomization{ObjectMeta: om}, p.token); err != nil {
			return err
		}
		if p.name == "kcl" {
			return b.annotate(&kclv1.KCLArtifact{ObjectMeta: om}, p.token)
		}
		return nil
	})
}

// cmpWait waits until the phase is over for every application: applied at the expected revision,
// or, for the no-op, the reconcile request handled.
func (b *bench) cmpWait(p *pipeline, phase string) (time.Time, error) {
	return b.poll(p.name+" / "+phase, b.cfg.poll, b.cfg.timeout, func(ctx context.Context) (bool, string, error) {
		n := 0
		for _, app := range p.apps {
			var ks kustomizev1.Kustomization
			if err := b.watched.Get(ctx, app, &ks); err != nil {
				continue
			}
			if b.cmpDone(ctx, p, phase, app, &ks) {
				n++
			}
		}
		return n == len(p.apps), fmt.Sprintf("%d/%d done", n, len(p.apps)), nil
	})
}

func (b *bench) cmpDone(ctx context.Context, p *pipeline, phase string, app types.NamespacedName, ks *kustomizev1.Kustomization) bool {
	if phase == "no-op" {
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
		return ks.Status.LastAppliedRevision == p.revs[app.Namespace]
	}
	var o kclv1.KCLArtifact
	if b.watched.Get(ctx, client.ObjectKeyFromObject(ks), &o) != nil || o.Status.Artifact == nil {
		return false
	}
	return o.Status.SourceRevision == p.revs[app.Namespace] && ks.Status.LastAppliedRevision == o.Status.Artifact.Revision
}

// cmpMarkT is the CPU of every component and the kube-apiserver's request count at one moment.
type cmpMarkT struct {
	cpu      map[string]time.Duration
	requests float64
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
	m.requests = b.apiserverRequests()
	return m
}

// apiserverRequests is the kube-apiserver's apiserver_request_total, summed.
func (b *bench) apiserverRequests() float64 {
	cs, err := kubernetes.NewForConfig(b.env.Config)
	if err != nil {
		return 0
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(b.ctx)
	if err != nil {
		return 0
	}
	total := 0.0
	for line := range strings.SplitSeq(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			total += v
		}
	}
	return total
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

// compareTable is one row per phase and figure: plain, kcl and kcl/plain.
func compareTable(r map[string]map[string]cmpResult, n, namespaces int) string {
	header := []string{"phase", "figure", "plain Flux", "KCLArtifacts", "KCL / plain"}
	var rows [][]string
	ratio := func(a, b float64) string {
		if a == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f×", b/a)
	}
	for _, phase := range []string{"create", "commit", "no-op"} {
		p, k := r["plain"][phase], r["kcl"][phase]
		rows = append(rows, []string{phase, "wall to all " + map[bool]string{true: "handled", false: "applied"}[phase == "no-op"],
			fmtDur(p.wall), fmtDur(k.wall), ratio(float64(p.wall), float64(k.wall))})
		var pt, kt time.Duration
		for _, c := range components {
			pt += p.cpu[c]
			kt += k.cpu[c]
			if p.cpu[c] == 0 && k.cpu[c] == 0 {
				continue
			}
			rows = append(rows, []string{"", "CPU " + c, fmt.Sprintf("%.1fs", p.cpu[c].Seconds()),
				fmt.Sprintf("%.1fs", k.cpu[c].Seconds()), ratio(float64(p.cpu[c]), float64(k.cpu[c]))})
		}
		rows = append(rows, []string{"", "CPU total", fmt.Sprintf("%.1fs", pt.Seconds()), fmt.Sprintf("%.1fs", kt.Seconds()),
			ratio(float64(pt), float64(kt))})
		own := k.cpu["kcl-artifact-controller"] + k.cpu["kcl workers"]
		if kt > 0 {
			rows = append(rows, []string{"", "this controller's share of the CPU", "", fmt.Sprintf("%.1f %%", 100*float64(own)/float64(kt)), ""})
		}
		rows = append(rows, []string{"", "kube-apiserver requests", fmt.Sprintf("%.0f", p.requests), fmt.Sprintf("%.0f", k.requests),
			ratio(p.requests, k.requests)})
	}
	return fmt.Sprintf("%d applications over %d namespaces, one GitRepository per namespace:\n\n", n, namespaces) +
		markdownTable(header, rows)
}
