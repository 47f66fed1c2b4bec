package controller

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The API server's bill follows the number of writes and the size of the objects written
// (docs/benchmarks.md#scale, issue 56): these ceilings are what one KCLArtifact costs it per
// phase. Each write counted is the reconciler's (its client: creates, updates, patches, applies,
// status included) or a Kubernetes event it records (one create or patch of an Event each).
const (
	// the finalizer, the ExternalArtifact's create and status, the Kustomization's apply, the
	// status (artifact stored) and the new-artifact event
	writesCreate = 6
	// the ExternalArtifact's status (the new artifact), the status and the new-artifact event
	writesChangedOutput = 3
	// the status: the revision seen (TestUnchangedRenderWritesOnlyTheRevisionSeen)
	writesUnchangedOutput = 1
	// the status: the request handled (lastHandledReconcileAt)
	writesNoOp = 1
	// the status: KustomizationReady and the history's health
	writesApplied = 1
)

// eventWrites counts the Event writes in namespace ns: each event is created once and patched
// once per repetition (Count).
func (f *fixture) eventWrites() map[string]int {
	var evs corev1.EventList
	f.g.Expect(k8sClient.List(f.ctx, &evs, client.InNamespace(f.ns))).To(Succeed())
	out := map[string]int{}
	for _, e := range evs.Items {
		n := int(e.Count)
		if n < 1 {
			n = 1
		}
		out[fmt.Sprintf("event %s/%s %s", f.ns, e.InvolvedObject.Name, e.Reason)] += n
	}
	return out
}

// phaseWrites are the reconciler's writes and events of namespace ns since the snapshot before.
type phaseWrites struct {
	f              *fixture
	client, events map[string]int
}

func (f *fixture) snapshotWrites() phaseWrites {
	return phaseWrites{f: f, client: writes.in(f.ns), events: f.eventWrites()}
}

// since returns what was written since p, by object, and the total.
func (p phaseWrites) since() (map[string]int, int) {
	out := writes.since(p.client, p.f.ns)
	for k, v := range p.f.eventWrites() {
		if d := v - p.events[k]; d > 0 {
			out[k] = d
		}
	}
	total := 0
	for _, v := range out {
		total += v
	}
	return out, total
}

func describeWrites(w map[string]int) string {
	var lines []string
	for k, v := range w {
		lines = append(lines, fmt.Sprintf("%d × %s", v, k))
	}
	sort.Strings(lines)
	return strings.Join(lines, "; ")
}

// waitEvents waits until the namespace has at least n more event writes than before.
func (f *fixture) waitEvents(before phaseWrites, reason string) {
	f.t.Helper()
	f.g.Eventually(func() int {
		n := 0
		for k, v := range f.eventWrites() {
			if strings.HasSuffix(k, " "+reason) {
				n += v - before.events[k]
			}
		}
		return n
	}, timeout, interval).Should(BeNumerically(">", 0), "no %s event", reason)
}

// TestWritesPerPhase counts the writes of one KCLArtifact in each phase of its life, and fails
// above the ceilings: create, a new source revision with a changed output, one with an unchanged
// output, a requested no-op and kustomize-controller's health arriving.
func TestWritesPerPhase(t *testing.T) {
	f := newFixture(t)
	check := func(phase string, p phaseWrites, ceiling int) {
		t.Helper()
		w, total := p.since()
		t.Logf("%s: %d writes: %s", phase, total, describeWrites(w))
		f.g.Expect(total).To(BeNumerically("<=", ceiling), "%s: %s", phase, describeWrites(w))
	}

	f.commit("aaa", map[string]string{"main.k": program})
	p := f.snapshotWrites()
	obj := f.waitReady(f.create("app", nil))
	f.waitEvents(p, newArtifactReason)
	check("create", p, writesCreate)

	p = f.snapshotWrites()
	rev := obj.Status.Artifact.Revision
	playKustomizeController(f, "app", rev)
	waitKustomizationReady(f, obj, metav1.ConditionTrue, meta.ReconciliationSucceededReason)
	check("applied", p, writesApplied)

	p = f.snapshotWrites()
	f.commit("bbb", map[string]string{"main.k": strings.Replace(program, `"dev"`, `"new"`, 1)})
	obj = f.waitRevision(obj, "bbb")
	f.g.Expect(obj.Status.Artifact.Revision).NotTo(Equal(rev))
	f.waitEvents(p, newArtifactReason)
	check("changed output", p, writesChangedOutput)

	p = f.snapshotWrites()
	rev = obj.Status.Artifact.Revision
	playKustomizeController(f, "app", rev)
	waitKustomizationReady(f, obj, metav1.ConditionTrue, meta.ReconciliationSucceededReason)
	check("applied again", p, writesApplied)

	p = f.snapshotWrites()
	f.commit("ccc", map[string]string{"main.k": strings.Replace(program, `"dev"`, `"new"`, 1), "README.md": "x"})
	obj = f.waitRevision(obj, "ccc")
	f.g.Expect(obj.Status.Artifact.Revision).To(Equal(rev))
	check("unchanged output", p, writesUnchangedOutput)

	p = f.snapshotWrites()
	f.requestReconcile(obj)
	check("requested no-op", p, writesNoOp)
}

// maxEncodedSize bounds a KCLArtifact as the API server stores it (JSON, managed fields
// included) with status.history full (5 entries): a write costs the API server by its size. It
// measured 5,800 B (status 4,220 B, of which history 2,621 B; managed fields 1,228 B), then
// 5,642 B once the condition messages no longer repeated the revision, then 4,654 B (history
// 1,566 B) once history entries no longer stored what status.artifact.url and their digest give.
const maxEncodedSize = 4750

func TestEncodedSize(t *testing.T) {
	f := newFixture(t)
	limit := kclv1.DefaultHistoryLimit
	f.commit("r0", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.HistoryLimit = &limit }))
	for i := 1; i < limit+1; i++ {
		rev := obj.Status.Artifact.Revision
		playKustomizeController(f, "app", rev)
		waitKustomizationReady(f, obj, metav1.ConditionTrue, meta.ReconciliationSucceededReason)
		r := fmt.Sprintf("r%d", i)
		f.commit(r, map[string]string{"main.k": strings.Replace(program, `"dev"`, `"v`+r+`"`, 1)})
		obj = f.waitRevision(obj, r)
	}
	playKustomizeController(f, "app", obj.Status.Artifact.Revision)
	waitKustomizationReady(f, obj, metav1.ConditionTrue, meta.ReconciliationSucceededReason)
	f.g.Expect(obj.Status.History).To(HaveLen(limit))

	// as the API server stores it: read as JSON, not decoded into the Go types
	stored := &unstructured.Unstructured{}
	stored.SetGroupVersionKind(kclv1.GroupVersion.WithKind(kclv1.KCLArtifactKind))
	f.g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), stored)).To(Succeed())
	full, err := json.Marshal(stored.Object)
	f.g.Expect(err).NotTo(HaveOccurred())
	status, _ := json.Marshal(stored.Object["status"])
	history, _ := json.Marshal(stored.Object["status"].(map[string]any)["history"])
	conds, _ := json.Marshal(stored.Object["status"].(map[string]any)["conditions"])
	managed, _ := json.Marshal(stored.GetManagedFields())
	t.Logf("encoded KCLArtifact: %d B (status %d B: history %d B for %d entries, conditions %d B; managed fields %d B)",
		len(full), len(status), len(history), len(obj.Status.History), len(conds), len(managed))
	t.Logf("status: %s", status)
	f.g.Expect(len(full)).To(BeNumerically("<=", maxEncodedSize))

	// stored short, read whole: each entry's URL is its file beside the current artifact's, with
	// its token, and its revision the ref of its source revision at its digest
	entries, _, _ := unstructured.NestedSlice(stored.Object, "status", "history")
	f.g.Expect(entries).To(HaveLen(limit))
	dir, _, _ := strings.Cut(obj.Status.Artifact.URL, "?")
	dir = dir[:strings.LastIndex(dir, "/")+1]
	_, query, _ := strings.Cut(obj.Status.Artifact.URL, "?")
	for i, e := range obj.Status.History {
		raw := entries[i].(map[string]any)
		f.g.Expect(raw).NotTo(HaveKey("revision"), "entry %d", i)
		f.g.Expect(raw["url"]).To(MatchRegexp(`^[0-9a-f]{64}\.tar\.gz$`), "entry %d", i)
		f.g.Expect(e.URL).To(Equal(dir+raw["url"].(string)+"?"+query), "entry %d", i)
		f.g.Expect(e.Revision).To(Equal("main@"+e.Digest), "entry %d", i)
	}
	f.g.Expect(obj.Status.History[0].URL).To(Equal(obj.Status.Artifact.URL))
}

// namespaceCounter counts per namespace. A test that proves something is not rendered counts its
// own namespace's renders: the objects of earlier tests go on rendering in the background (the
// noisy tests' endless renders are retried until the suite ends).
type namespaceCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *namespaceCounter) add(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[ns]++
}

func (c *namespaceCounter) of(ns string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[ns]
}
