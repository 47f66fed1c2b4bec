package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/procstatus"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// The noisy-neighbour mode (--noisy, issue 33) measures, in one run, how long a tenant's spec
// change takes to be served while another namespace abuses the controller:
//
//   - victims: --victims namespaces, one KCLArtifact each rendering a small program;
//   - quiet round: every victim's argument changes at once; per victim, the time from its change
//     until it is Ready at the new generation with a new artifact;
//   - attacker: the namespace "noisy" with four attacks at once: A, kcl.mod dependencies on a
//     server that sends a byte every 5 s; B, programs that compute until the render timeout; C,
//     52 MB outputs whose argument changes every 10 s; D, small programs at interval 1ms;
//   - noisy round: the same victim changes, timed the same way, while the attacker goes on.
//
// With --attack-namespaces (issue 45: a tenant owns several namespaces) the attack and its noisy
// round are run once per entry, the same objects dealt out in turn over that many namespaces
// ("noisy" alone for one, noisy-<n>-<i> otherwise, all reading the source in "noisy"); each
// attack is deleted, and the controller settles, before the next.
//
// It reports the victims' latencies against the goal (noisy p95 ≤ 2 × quiet p95 + the victim's
// own spec.timeout), the controller's peak RSS in each round against 400 MB, what became of
// each attack, whether C's last published artifact is the one of its latest argument, and the
// controller's per-namespace metrics when it has them.

var (
	// noisyControllerArgs: the dependency fetches may reach the attacker's server on 127.0.0.1
	// (fluxenv passes it too: the run does not depend on that staying so), and the interval
	// floor is production's, not the 1s fluxenv gives the tests.
	noisyControllerArgs = []string{"--kcl-deps-allowed-networks=127.0.0.0/8", "--min-interval=10s"}
	// noisyControllerEnv is config/manager's: the controller's peak RSS is measured as deployed.
	noisyControllerEnv = []string{"GOMEMLIMIT=320MiB"}
)

const (
	// noisyRoleLabel tells victims from the attacker's groups.
	noisyRoleLabel = "bench-noisy.kcl-flux.io/role"
	roleVictim     = "victim"
	attackNS       = "noisy"
	victimSrcNS    = "victims-src"
	// victimTimeout is the victims' spec.timeout, part of the goal.
	victimTimeout = 30 * time.Second
	// attackTimeout is the attacker's spec.timeout: as long as the API takes, so that only the
	// controller's own bounds stop it.
	attackTimeout = 100 * time.Hour
	// bigChangeEvery is how often C's argument changes, so that C keeps rendering at full size
	// (an unchanged input is not rendered again).
	bigChangeEvery = 10 * time.Second
	// noisyWarmup is how long the attacker runs before the noisy round, at least: the round
	// starts once a C object has published and an A and a B object have failed once, so that
	// the controller has held a full-size output within the round's peak and the slow fetches
	// and endless renders are under way (at most noisyWarmupMax).
	noisyWarmup    = 20 * time.Second
	noisyWarmupMax = 6 * time.Minute
	// noisyConverge bounds the wait, at the end, for C to publish its latest argument (and so
	// does --timeout). C waits behind its own namespace's endless renders and slow fetches: the
	// namespace's share is first in, first out.
	noisyConverge = 15 * time.Minute
	// servedPoll is how often the victims are read (from the watch cache) during a round: the
	// resolution of the latencies.
	servedPoll = 100 * time.Millisecond
	// rssGoal is the bound on the controller's peak RSS under attack.
	rssGoal = 400 << 20
)

// attackGroup is one of the attacker's four kinds of object.
type attackGroup struct {
	id, title string
	n         int
	// spec fills the i-th object's spec (its path and arguments, intervals).
	spec func(i int, s *kclv1.KCLArtifactSpec)
}

func (g attackGroup) role() string { return "attack-" + g.id }

// victim is one victim KCLArtifact and its artifact digest before the current round's change.
type victim struct {
	key    types.NamespacedName
	digest string
}

// noisyRun is the state of one --noisy run.
type noisyRun struct {
	b       *bench
	victims []victim
	groups  []attackGroup
	drip    *dripServer
	rounds  []*noisyRound

	// seeds are C's latest arguments, by object.
	mu    sync.Mutex
	seeds map[types.NamespacedName]string

	// attacks are the attacker's runs, one per --attack-namespaces entry; cur is the one running.
	attacks []*attackRun
	cur     *attackRun
}

// attackRun is the attacker's four attacks spread over spread namespaces, and what they did.
type attackRun struct {
	spread     int
	namespaces []string
	round      *noisyRound
	changes    int // C's argument changes

	attackStarted time.Time
	// attackHWM is the controller's peak RSS from the attacker's creation to C's convergence.
	attackHWM uint64
	converged time.Duration // how long C took to converge at the end; <0 when it did not
	bigChecks []bigCheck
	final     map[string]groupState // by group id
}

// attackNamespaces names the namespaces of an attack spread over n: the attacker's own
// namespace alone for one (the source's), as before.
func attackNamespaces(n int) []string {
	if n == 1 {
		return []string{attackNS}
	}
	nss := make([]string, n)
	for i := range nss {
		nss[i] = fmt.Sprintf("%s-%d-%d", attackNS, n, i)
	}
	return nss
}

// namespaceOf is the namespace of a group's i-th object: the groups are dealt out in turn.
func (a *attackRun) namespaceOf(i int) string { return a.namespaces[i%len(a.namespaces)] }

// runNoisy is --noisy: the victims, their quiet round, the attacker and the noisy round, C's
// convergence, the report. The drip server stops with the environment, on failure too.
func (b *bench) runNoisy() error {
	n := &noisyRun{b: b, seeds: map[types.NamespacedName]string{}}
	var err error
	if n.drip, err = startDripServer(); err != nil {
		return err
	}
	b.cleanups = append(b.cleanups, n.drip.close)
	n.groups = n.attackGroups()
	if err := n.setup(); err != nil {
		return err
	}
	b.settle("after creating the victims")
	if err := n.round("quiet", 2, nil); err != nil {
		return err
	}
	b.settle("after the quiet round")
	for _, spread := range b.cfg.attackNamespaces {
		b.settle("before the attack")
		if err := n.runAttack(spread); err != nil {
			return err
		}
	}
	return n.writeReport()
}

// runAttack runs the four attacks spread over spread namespaces: the noisy round, C's
// convergence, the outcome, then deletes the attacker's objects and waits until they are gone.
func (n *noisyRun) runAttack(spread int) error {
	b := n.b
	a := &attackRun{spread: spread, namespaces: attackNamespaces(spread)}
	n.cur = a
	n.attacks = append(n.attacks, a)
	stopChanges := make(chan struct{})
	var changer sync.WaitGroup
	err := n.round(fmt.Sprintf("noisy over %d", spread), 3+len(n.attacks)-1, func() error {
		if err := n.createAttack(); err != nil {
			return err
		}
		changer.Go(func() { n.changeBig(stopChanges) })
		return n.warmUp()
	})
	close(stopChanges)
	changer.Wait()
	if err != nil {
		return err
	}
	a.round = n.rounds[len(n.rounds)-1]
	if err := n.convergeBig(); err != nil {
		return err
	}
	if m, err := procstatus.Bytes(b.ctrl.PID(), "VmHWM"); err == nil {
		a.attackHWM = m["VmHWM"]
	}
	if err := n.attackOutcome(); err != nil {
		return err
	}
	return n.deleteAttack()
}

// deleteAttack deletes the attacker's objects (which cancels their reconciles in flight) and
// waits until the controller has finalized them.
func (n *noisyRun) deleteAttack() error {
	b := n.b
	for _, g := range n.groups {
		for _, ns := range n.cur.namespaces {
			if err := b.c.DeleteAllOf(b.ctx, &kclv1.KCLArtifact{}, client.InNamespace(ns), client.MatchingLabels{noisyRoleLabel: g.role()}); err != nil {
				return fmt.Errorf("deleting the attacker's %s objects in %s: %w", g.id, ns, err)
			}
		}
	}
	_, err := b.poll("attacker deleted", time.Second, b.cfg.timeout, func(ctx context.Context) (bool, string, error) {
		left := 0
		for _, g := range n.groups {
			list, err := n.list(ctx, g.role())
			if err != nil {
				return false, "", err
			}
			left += len(list)
		}
		return left == 0, fmt.Sprintf("%d attacker objects left", left), nil
	})
	return err
}

// setup creates the victims' source and namespaces, the attacker's source (its kcl.mod files
// name the drip server), and the victims, and waits until every victim is Ready.
func (n *noisyRun) setup() error {
	b := n.b
	for _, ns := range []string{victimSrcNS, attackNS} {
		if err := b.c.Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	if err := n.newSource(victimSrcNS, "noisy-victims", map[string]string{"main.k": victimProgram}); err != nil {
		return err
	}
	if err := n.newSource(attackNS, "noisy-attack", attackFiles(n.drip.host)); err != nil {
		return err
	}
	for i := range n.b.cfg.victims {
		n.victims = append(n.victims, victim{key: types.NamespacedName{Namespace: fmt.Sprintf("victim-%02d", i), Name: "app"}})
	}
	logf("== noisy: %d victims in %s..%s, attacker namespace %s, drip server %s", len(n.victims),
		n.victims[0].key.Namespace, n.victims[len(n.victims)-1].key.Namespace, attackNS, n.drip.host)
	t0 := time.Now()
	err := b.parallel(len(n.victims), func(i int) error {
		key := n.victims[i].key
		if err := b.c.Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.Namespace}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", key.Namespace, err)
		}
		return b.c.Create(b.ctx, victimObject(key))
	})
	if err != nil {
		return err
	}
	_, err = b.poll("victims Ready", b.cfg.poll, b.cfg.timeout, func(ctx context.Context) (bool, string, error) {
		list, err := n.list(ctx, roleVictim)
		if err != nil {
			return false, "", err
		}
		ready := 0
		for i := range list {
			if isReady(&list[i]) && list[i].Status.Artifact != nil {
				ready++
			}
		}
		return ready == len(n.victims), fmt.Sprintf("%d/%d Ready", ready, len(n.victims)), nil
	})
	if err != nil {
		return err
	}
	logf("   %d victims Ready in %s", len(n.victims), fmtDur(time.Since(t0)))
	return nil
}

func victimObject(key types.NamespacedName) *kclv1.KCLArtifact {
	return &kclv1.KCLArtifact{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{noisyRoleLabel: roleVictim}},
		Spec: kclv1.KCLArtifactSpec{
			SourceRef: kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: sourceName, Namespace: victimSrcNS},
			// nothing periodic: every render is one a round asked for
			Interval:      metav1.Duration{Duration: time.Hour},
			RetryInterval: &metav1.Duration{Duration: 10 * time.Second},
			Timeout:       &metav1.Duration{Duration: victimTimeout},
			Arguments:     map[string]string{"name": key.Namespace, "value": "round-1"},
			Kustomization: &kclv1.KustomizationTemplate{Disabled: true},
		},
	}
}

// newSource commits files as a new repository and creates its GitRepository (sourceName) in
// ns, then waits until source-controller has its artifact.
func (n *noisyRun) newSource(ns, repo string, files map[string]string) error {
	b := n.b
	dir, err := os.MkdirTemp("", "bench-noisy-repo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeTree(dir, files); err != nil {
		return err
	}
	sha, err := b.env.Git.CreateRepo(repo, dir)
	if err != nil {
		return err
	}
	gr := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: sourceName, Namespace: ns},
		Spec: sourcev1.GitRepositorySpec{
			URL:       b.env.Git.URL(repo),
			Interval:  metav1.Duration{Duration: time.Hour},
			Timeout:   &metav1.Duration{Duration: time.Minute},
			Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch},
		},
	}
	if err := b.c.Create(b.ctx, gr); err != nil {
		return fmt.Errorf("creating GitRepository %s/%s: %w", ns, sourceName, err)
	}
	_, err = b.waitSourceRevision(&pass{srcNS: ns}, gitRevision(sha))
	return err
}

// list reads the KCLArtifacts of a role from the watch cache, without copying them: the caller
// only reads.
func (n *noisyRun) list(ctx context.Context, role string) ([]kclv1.KCLArtifact, error) {
	var list kclv1.KCLArtifactList
	err := n.b.watched.List(ctx, &list, client.MatchingLabels{noisyRoleLabel: role}, client.UnsafeDisableDeepCopy)
	return list.Items, err
}

// noisyRound is what one round measured.
type noisyRound struct {
	name string
	// latencies are per victim, in victim order; a victim not served counts as the timeout.
	latencies     []time.Duration
	unserved      int
	p50, p95, max time.Duration
	// wall runs from the first change until the last victim was served (or the timeout);
	// measured is the span of the CPU and peak figures (for the noisy round, from the
	// attacker's creation on).
	wall, measured        time.Duration
	ctrlCPU, workerCPU    time.Duration
	ctrlHWM, workerPeak   uint64
	hwmReset              bool
	detail                string
	startMark, endMark    mark
	firstChange, lastSeen time.Time
}

// round measures one round: from a reset of the controller's peak RSS and the sampler, through
// before (the attacker's start, for the noisy round), to every victim served at version.
func (n *noisyRun) round(name string, version int, before func() error) error {
	b := n.b
	logf("-- noisy / %s round: every victim's argument changes to round-%d", name, version)
	r := &noisyRound{name: name}
	r.hwmReset = resetPeakRSS(b.ctrl.PID())
	var err error
	if r.startMark, err = b.begin(); err != nil {
		return err
	}
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	if err := n.changeVictims(r, version); err != nil {
		return err
	}
	if r.endMark, err = b.mark(false); err != nil {
		return err
	}
	n.measureRound(r)
	n.rounds = append(n.rounds, r)
	logf("   %s: p50 %s, p95 %s, max %s, not served %d/%d; controller peak RSS %.0f MB, worker peak RSS %.0f MB, controller CPU %.1f s, worker CPU %.1f s",
		name, fmtDur(r.p50), fmtDur(r.p95), fmtDur(r.max), r.unserved, len(n.victims), mb(r.ctrlHWM), mb(r.workerPeak),
		r.ctrlCPU.Seconds(), r.workerCPU.Seconds())
	logf("   %s", r.detail)
	return nil
}

// changeVictims changes every victim's argument in a burst and waits until each is served: Ready
// at the new generation with a new artifact digest, or the round's timeout.
func (n *noisyRun) changeVictims(r *noisyRound, version int) error {
	b := n.b
	value := fmt.Sprintf("round-%d", version)
	t0 := make([]time.Time, len(n.victims))
	gens := make([]int64, len(n.victims))
	if err := n.recordDigests(); err != nil {
		return err
	}
	r.firstChange = time.Now()
	err := b.parallel(len(n.victims), func(i int) error {
		key := n.victims[i].key
		obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
		patch := fmt.Sprintf(`{"spec":{"arguments":{"value":%q}}}`, value)
		t0[i] = time.Now()
		if err := b.c.Patch(b.ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			return fmt.Errorf("changing %s: %w", key, err)
		}
		gens[i] = obj.Generation
		return nil
	})
	if err != nil {
		return err
	}
	logf("   changed %d victims in %s", len(n.victims), fmtDur(time.Since(r.firstChange)))
	r.latencies = make([]time.Duration, len(n.victims))
	served := make([]bool, len(n.victims))
	index := map[types.NamespacedName]int{}
	for i, v := range n.victims {
		index[v.key] = i
	}
	deadline := r.firstChange.Add(b.cfg.timeout)
	// the poll's own timeout is only a backstop: the round ends at its deadline, unserved
	// victims counted, and the run goes on
	_, err = b.poll("victims served ("+r.name+")", servedPoll, b.cfg.timeout+time.Minute, func(ctx context.Context) (bool, string, error) {
		list, err := n.list(ctx, roleVictim)
		if err != nil {
			return false, "", err
		}
		now := time.Now()
		states := map[string]int{}
		for j := range list {
			o := &list[j]
			i, ok := index[types.NamespacedName{Namespace: o.Namespace, Name: o.Name}]
			if !ok || served[i] {
				continue
			}
			if isServed(o, gens[i], n.victims[i].digest) {
				served[i], r.latencies[i], r.lastSeen = true, now.Sub(t0[i]), now
				continue
			}
			states[readyState(o)]++
		}
		left := len(n.victims) - countTrue(served)
		return left == 0 || now.After(deadline), fmt.Sprintf("%d/%d served; others: %s", len(n.victims)-left, len(n.victims), countsString(states)), nil
	})
	if err != nil {
		return err
	}
	for i := range served {
		if !served[i] {
			r.unserved++
			r.latencies[i] = b.cfg.timeout
			r.lastSeen = deadline
		}
	}
	return nil
}

// recordDigests notes each victim's artifact digest before a change: a served victim has a
// new one.
func (n *noisyRun) recordDigests() error {
	list, err := n.list(n.b.ctx, roleVictim)
	if err != nil {
		return err
	}
	digests := map[types.NamespacedName]string{}
	for i := range list {
		if a := list[i].Status.Artifact; a != nil {
			digests[types.NamespacedName{Namespace: list[i].Namespace, Name: list[i].Name}] = a.Digest
		}
	}
	for i := range n.victims {
		n.victims[i].digest = digests[n.victims[i].key]
	}
	return nil
}

// isServed: Ready at generation gen (or later) with an artifact other than the one before.
func isServed(o *kclv1.KCLArtifact, gen int64, oldDigest string) bool {
	return isReady(o) && o.Status.ObservedGeneration >= gen && o.Status.Artifact != nil && o.Status.Artifact.Digest != oldDigest
}

func readyState(o *kclv1.KCLArtifact) string {
	c := apimeta.FindStatusCondition(o.Status.Conditions, meta.ReadyCondition)
	if c == nil {
		return "no Ready condition"
	}
	return fmt.Sprintf("Ready=%s %s", c.Status, c.Reason)
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// measureRound fills the round's percentiles, CPU, peaks and details from its marks.
func (n *noisyRun) measureRound(r *noisyRound) {
	b := n.b
	sorted := slices.Clone(r.latencies)
	slices.Sort(sorted)
	r.p50, r.p95, r.max = percentile(sorted, 50), percentile(sorted, 95), sorted[len(sorted)-1]
	r.wall = r.lastSeen.Sub(r.firstChange)
	start, end := r.startMark, r.endMark
	r.measured = end.at.Sub(start.at)
	r.ctrlCPU = ticksToDuration(end.cpu[0].ctrl.CPU() - start.cpu[0].ctrl.CPU())
	r.workerCPU = ticksToDuration(workerTicks(start.cpu[0], end.cpu[0]))
	r.ctrlHWM = end.hwm[0]
	r.workerPeak, _ = b.smp.peaks()
	r.detail = fmt.Sprintf("%s round over %s: reconciles %s; renders %s; worker kills %s; dependency cache %s; API requests %s",
		r.name, fmtDur(r.measured),
		deltaByLabel(start.metrics, end.metrics, mReconciles, "result"),
		deltaByLabel(start.metrics, end.metrics, mRenders, "result"),
		deltaByLabel(start.metrics, end.metrics, mWorkerKills, "reason"),
		deltaByLabel(start.metrics, end.metrics, mDepCache, "result"),
		deltaString(start.metrics, end.metrics, mRESTRequests))
}

func deltaString(a, b scrape, name string) string {
	if v, ok := delta(a, b, name, nil); ok {
		return fmt.Sprintf("%.0f", v)
	}
	return "n/a"
}

// percentile is the nearest-rank p-th percentile of sorted.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}

// resetPeakRSS resets the controller's VmHWM to its current RSS (clear_refs 5), so that a
// round's peak is its own.
func resetPeakRSS(pid int) bool {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		logf("   WARNING: cannot reset the controller's peak RSS (the peak is then since its start): %v", err)
		return false
	}
	return true
}
