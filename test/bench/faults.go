package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
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
	// stores are the artifacts stored from the fault to convergence, by every controller process
	// (from their logs, which survive a kill); repeated are those a KCLArtifact had already
	// stored at the same revision within that time.
	stores, repeated int
	// skipped says why the fault was not run.
	skipped string
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
		{"restart kube-apiserver during a re-publish", b.faultRestart("kube-apiserver", b.env.RestartAPIServer)},
		{"restart etcd during a re-publish", b.faultRestart("etcd", b.env.RestartEtcd)},
		{"storage volume full during a re-publish, then freed", b.faultFullVolume},
	} {
		logf("== fault: %s", f.name)
		pid := b.ctrl.PID()
		before, _ := scrapeMetrics(b.ctx, b.ctrl.MetricsURL())
		began := time.Now()
		r, err := f.run(p)
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		r.fault = f.name
		if r.skipped != "" {
			logf("   skipped: %s", r.skipped)
			rows = append(rows, r)
			continue
		}
		r.renders = b.rendersSince(before, pid)
		if r.stores, r.repeated, err = storesBetween(b.ctrl.LogPath, began, time.Now()); err != nil {
			return err
		}
		rows = append(rows, r)
		logf("   recovered in %s (%s); renders %s; artifacts stored %d, %d of them again at the same revision",
			fmtDur(r.recovery), r.from, r.renders, r.stores, r.repeated)
		b.settle("after " + f.name)
	}
	var cells [][]string
	for _, r := range rows {
		if r.skipped != "" {
			cells = append(cells, []string{r.fault, "skipped: " + r.skipped, "", "", ""})
			continue
		}
		cells = append(cells, []string{r.fault, fmtDur(r.recovery), r.from, r.renders,
			fmt.Sprintf("%d (%d again)", r.stores, r.repeated)})
	}
	table := fmt.Sprintf("%d KCLArtifacts with generated Kustomizations over %d namespaces; after each fault every "+
		"KCLArtifact is Ready at the latest revision, every ExternalArtifact answers 200 with its digest and every "+
		"Kustomization applied it:\n\n", b.cfg.n, b.cfg.namespaces) +
		markdownTable([]string{"fault", "recovery", "measured from", "renders (metrics)", "artifacts stored (logs)"}, cells)
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

// faultRestart restarts a control plane process at a random point of a re-publish.
func (b *bench) faultRestart(name string, restart func() error) func(*pass) (faultResult, error) {
	return func(p *pass) (faultResult, error) {
		t0 := time.Now()
		rev, err := b.commitVersion(p)
		if err != nil {
			return faultResult{}, err
		}
		time.Sleep(time.Duration(500+rand.IntN(3000)) * time.Millisecond)
		began := time.Now()
		if err := restart(); err != nil {
			return faultResult{}, err
		}
		logf("   %s stopped and started again in %s", name, fmtDur(time.Since(began)))
		return b.converge(p, rev, t0, "the commit")
	}
}

// faultFullVolume moves the storage onto a tmpfs, fills it, and commits: every KCLArtifact must
// fail with StorageFailed while the ExternalArtifacts keep serving the last good artifacts; then
// the space is freed and everything must converge by itself (retryInterval), with no request.
func (b *bench) faultFullVolume(p *pass) (faultResult, error) {
	if os.Geteuid() != 0 {
		return faultResult{skipped: "mounting a tmpfs needs root"}, nil
	}
	dir := b.ctrl.StorageDir
	if err := b.storageOnTmpfs(dir); err != nil {
		return faultResult{}, err
	}
	filler := filepath.Join(dir, ".bench-scale-filler")
	n, err := fill(filler)
	if err != nil {
		return faultResult{}, err
	}
	logf("   storage on a tmpfs, filled with %d MiB", n>>20)
	rev, err := b.commitVersion(p)
	if err != nil {
		return faultResult{}, err
	}
	var example string
	if _, err := b.waitArtifacts(p, "StorageFailed while full", func(o *kclv1.KCLArtifact) bool {
		c := apimeta.FindStatusCondition(o.Status.Conditions, meta.ReadyCondition)
		if c != nil && c.Reason == kclv1.StorageFailedReason && example == "" {
			example = firstLine(c.Message)
		}
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == kclv1.StorageFailedReason
	}); err != nil {
		return faultResult{}, err
	}
	logf("   every KCLArtifact failed to store, e.g. %q", example)
	if bad := b.badArtifacts(b.ctx, p); len(bad) > 0 {
		return faultResult{}, fmt.Errorf("with the volume full, %d ExternalArtifacts do not serve the last good artifact, e.g. %s", len(bad), bad[0])
	}
	logf("   every ExternalArtifact still serves its last good artifact")
	t0 := time.Now()
	if err := os.Remove(filler); err != nil {
		return faultResult{}, err
	}
	return b.converge(p, rev, t0, "freeing the volume")
}

// storageOnTmpfs restarts the controller with its storage on a tmpfs twice the size of what it
// holds (plus 16 MiB), with the same contents: nothing needs rendering again. The rest is filled
// by the fault.
func (b *bench) storageOnTmpfs(dir string) error {
	b.kill9()
	disk := dir + ".disk"
	if err := os.Rename(dir, disk); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	used, err := du(disk)
	if err != nil {
		return err
	}
	size := 2*used + 16<<20
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", dir, err)
	}
	b.cleanups = append(b.cleanups, func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	if out, err := exec.Command("cp", "-a", disk+"/.", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("copying the storage onto the tmpfs: %v: %s", err, out)
	}
	logf("   storage %s on a tmpfs of %d MiB (%d MiB used)", dir, size>>20, used>>20)
	return b.restart()
}

// fill writes path until the file system has no space left, and returns how much it wrote.
func fill(path string) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for _, chunk := range []int{1 << 20, 4 << 10, 1} {
		buf := make([]byte, chunk)
		for {
			w, err := f.Write(buf)
			n += int64(w)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// du is the space the entries under dir take on a tmpfs: each file, directory and link at least
// a page (thousands of 1 KiB artifacts take four times their size).
func du(dir string) (int64, error) {
	const page = 4096
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		size := int64(0)
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			size = info.Size()
		}
		n += max(page, (size+page-1)/page*page)
		return nil
	})
	return n, err
}

var storedLine = regexp.MustCompile(`"namespace": "([^"]+)", "name": "([^"]+)".*"revision": "([^"]+)"`)

// storesBetween reads "artifact stored" lines of a controller log (every process that used it:
// a restarted controller appends) between t0 and t1: how many artifacts were stored, and how
// many of them a KCLArtifact had already stored at the same revision within that time.
func storesBetween(logPath string, t0, t1 time.Time) (stores, repeated int, err error) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return 0, 0, err
	}
	seen := map[string]bool{}
	for line := range strings.SplitSeq(string(data), "\n") {
		ts, rest, ok := strings.Cut(line, "\t")
		if !ok || !strings.Contains(rest, "\tartifact stored\t") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || at.Before(t0) || at.After(t1) {
			continue
		}
		m := storedLine.FindStringSubmatch(rest)
		if m == nil {
			continue
		}
		stores++
		key := m[1] + "/" + m[2] + "@" + m[3]
		if seen[key] {
			repeated++
		}
		seen[key] = true
	}
	return stores, repeated, nil
}
