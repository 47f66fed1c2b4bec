package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// The fault mode (--faults) puts N KCLArtifacts with generated Kustomizations through faults, one
// after the other, and after each waits until everything converged: every KCLArtifact Ready at
// the latest source revision, every ExternalArtifact answering 200 with its digest, every
// Kustomization having applied it. It reports the recovery time of each fault and the renders of
// the controller process that recovered.

// faultResult is one row of the fault table.
type faultResult struct {
	fault, from string
	recovery    time.Duration
	renders     string
}

func (b *bench) runFaults() error {
	p, err := b.setupPass(1, "enabled")
	if err != nil {
		return err
	}
	if err := b.phaseCreate(p); err != nil {
		return err
	}
	var rows []faultResult
	for _, f := range []struct {
		name string
		run  func(*pass) (faultResult, error)
	}{
		{"kill -9 the controller 3 times during a re-publish", b.faultKillDuringRepublish},
		{"restart with the storage wiped", b.faultWipedStorage},
		{"kill the render workers during a re-publish", b.faultKillWorkers},
		{"corrupt a tenth of the artifacts in storage", b.faultCorrupt},
	} {
		logf("== fault: %s", f.name)
		pid := b.ctrl.PID()
		before, _ := scrapeMetrics(b.ctx, b.ctrl.MetricsURL())
		r, err := f.run(p)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		r.fault = f.name
		r.renders = b.rendersSince(before, pid)
		rows = append(rows, r)
		logf("   recovered in %s (%s); renders %s", fmtDur(r.recovery), r.from, r.renders)
		b.settle("after " + f.name)
	}
	var cells [][]string
	for _, r := range rows {
		cells = append(cells, []string{r.fault, fmtDur(r.recovery), r.from, r.renders})
	}
	table := fmt.Sprintf("%d KCLArtifacts with generated Kustomizations over %d namespaces; after each fault every "+
		"KCLArtifact is Ready at the latest revision, every ExternalArtifact answers 200 with its digest and every "+
		"Kustomization applied it:\n\n", b.cfg.n, b.cfg.namespaces) +
		markdownTable([]string{"fault", "recovery", "measured from", "renders"}, cells)
	fmt.Print("\n" + table + "\n" + b.describeRun())
	out := strings.TrimSuffix(b.cfg.out, ".md") + "-faults.md"
	return os.WriteFile(out, []byte(table+"\n"+b.describeRun()), 0o644)
}

// commitVersion commits a new version of the program and waits until the GitRepository has it.
func (b *bench) commitVersion(p *pass) (string, error) {
	p.version++
	sha, err := b.env.Git.CommitFiles(p.repo, fmt.Sprintf("version %d", p.version),
		map[string]string{"main.k": program(strconv.Itoa(p.version))})
	if err != nil {
		return "", err
	}
	rev := gitRevision(sha)
	if err := b.requestReconcile(&sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: sourceName, Namespace: p.srcNS}}); err != nil {
		return "", err
	}
	_, err = b.waitSourceRevision(p, rev)
	return rev, err
}

// restart starts the controller again on the same storage and staging directories, and the same
// artifact server address: in a cluster that is the Service's, the same for every Pod.
func (b *bench) restart() error {
	addr := b.ctrl.StorageAddr
	c, err := b.env.StartKCLController(b.ctx, fluxenv.KCLControllerOptions{Binary: b.binary, Name: controllerName,
		Args: append(slices.Clone(b.cfg.controllerArgs), "--storage-addr="+addr, "--storage-adv-addr="+addr)})
	if err != nil {
		return err
	}
	c.StorageAddr = addr
	b.ctrl, b.smp = c, newSampler(c.PID())
	return nil
}

func (b *bench) kill9() {
	_ = syscall.Kill(-b.ctrl.PID(), syscall.SIGKILL)
	<-b.ctrl.Done()
}

func (b *bench) faultKillDuringRepublish(p *pass) (faultResult, error) {
	t0 := time.Now()
	rev, err := b.commitVersion(p)
	if err != nil {
		return faultResult{}, err
	}
	for i := range 3 {
		// a random point of the re-publish, which takes tens of seconds at a thousand
		time.Sleep(time.Duration(500+rand.IntN(5000)) * time.Millisecond)
		logf("   kill -9 %d (pid %d)", i+1, b.ctrl.PID())
		b.kill9()
		if err := b.restart(); err != nil {
			return faultResult{}, err
		}
	}
	return b.converge(p, rev, t0, "the commit")
}

func (b *bench) faultWipedStorage(p *pass) (faultResult, error) {
	b.kill9()
	entries, err := os.ReadDir(b.ctrl.StorageDir)
	if err != nil {
		return faultResult{}, err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(b.ctrl.StorageDir, e.Name())); err != nil {
			return faultResult{}, err
		}
	}
	if err := b.restart(); err != nil {
		return faultResult{}, err
	}
	return b.converge(p, b.latest(p), time.Now(), "the restart")
}

func (b *bench) faultKillWorkers(p *pass) (faultResult, error) {
	t0 := time.Now()
	rev, err := b.commitVersion(p)
	if err != nil {
		return faultResult{}, err
	}
	killed := 0
	for range 5 {
		time.Sleep(time.Second)
		for k := range childrenOf(b.ctrl.PID()) {
			if isWorker(k.pid) && syscall.Kill(k.pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
	}
	logf("   killed %d workers", killed)
	return b.converge(p, rev, t0, "the commit")
}

func (b *bench) faultCorrupt(p *pass) (faultResult, error) {
	var list kclv1.KCLArtifactList
	if err := b.c.List(b.ctx, &list, client.MatchingLabels{passLabel: p.id}); err != nil {
		return faultResult{}, err
	}
	t0 := time.Now()
	corrupted := 0
	for i := range list.Items {
		o := &list.Items[i]
		if i%10 != 0 || o.Status.Artifact == nil {
			continue
		}
		path := filepath.Join(b.ctrl.StorageDir, filepath.FromSlash(o.Status.Artifact.Path))
		if err := os.WriteFile(path, []byte("not a tarball"), 0o644); err != nil {
			return faultResult{}, err
		}
		corrupted++
		// nothing tells the controller: the next reconcile (its interval) finds the file changed
		if err := b.requestReconcile(o); err != nil {
			return faultResult{}, err
		}
	}
	logf("   corrupted %d artifacts and requested their reconcile", corrupted)
	return b.converge(p, b.latest(p), t0, "the corruption")
}

// latest is the revision of the pass's GitRepository now.
func (b *bench) latest(p *pass) string {
	var gr sourcev1.GitRepository
	if err := b.c.Get(b.ctx, client.ObjectKey{Namespace: p.srcNS, Name: sourceName}, &gr); err != nil || gr.Status.Artifact == nil {
		return ""
	}
	return gr.Status.Artifact.Revision
}

// converge waits until everything converged at rev and returns the time from t0.
func (b *bench) converge(p *pass, rev string, t0 time.Time, from string) (faultResult, error) {
	if _, err := b.waitArtifacts(p, "converge", func(o *kclv1.KCLArtifact) bool {
		return isReady(o) && o.Status.Artifact != nil && o.Status.SourceRevision == rev
	}); err != nil {
		return faultResult{}, err
	}
	if _, err := b.waitApplied(p, "converge → applied"); err != nil {
		return faultResult{}, err
	}
	done, err := b.poll("every ExternalArtifact served with its digest", 2*time.Second, b.cfg.timeout,
		func(ctx context.Context) (bool, string, error) {
			bad := b.badArtifacts(ctx, p)
			return len(bad) == 0, fmt.Sprintf("%d bad, e.g. %s", len(bad), strings.Join(bad[:min(len(bad), 2)], "; ")), nil
		})
	if err != nil {
		return faultResult{}, err
	}
	return faultResult{from: from, recovery: done.Sub(t0)}, nil
}

// rendersSince are the renders since the fault began (before, of process pid): by result when
// the same process recovered, else those of the process that recovered, whose metrics started
// at zero (the killed ones' are lost).
func (b *bench) rendersSince(before scrape, pid int) string {
	after, err := scrapeMetrics(b.ctx, b.ctrl.MetricsURL())
	if err != nil {
		return "n/a"
	}
	if _, ok := after[mRenders]; !ok {
		return "0" // the counter appears with the first render
	}
	if b.ctrl.PID() == pid {
		return deltaByLabel(before, after, mRenders, "result")
	}
	return deltaByLabel(scrape{}, after, mRenders, "result") + " by the restarted process"
}

// badArtifacts lists the ExternalArtifacts of the pass that do not answer 200 with their digest.
func (b *bench) badArtifacts(ctx context.Context, p *pass) []string {
	var bad []string
	n := 0
	for _, ns := range p.namespaces {
		var eas sourcev1.ExternalArtifactList
		if err := b.c.List(ctx, &eas, client.InNamespace(ns)); err != nil {
			return []string{err.Error()}
		}
		n += len(eas.Items)
		for _, ea := range eas.Items {
			if why := fetchVerify(ctx, ea.Status.Artifact); why != "" {
				bad = append(bad, ea.Namespace+"/"+ea.Name+": "+why)
			}
		}
	}
	if len(bad) == 0 && n != len(p.objects) {
		bad = append(bad, fmt.Sprintf("%d ExternalArtifacts, want %d", n, len(p.objects)))
	}
	return bad
}

func fetchVerify(ctx context.Context, a *meta.Artifact) string {
	if a == nil {
		return "no artifact"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.Status
	}
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		return err.Error()
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != a.Digest {
		return "digest " + got
	}
	return ""
}
