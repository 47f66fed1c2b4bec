package controller

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	artcfg "github.com/fluxcd/pkg/artifact/config"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
)

// The promotion and history steps, each alone against fakes of its inputs: a real store in a
// scratch directory, and controller-runtime's fake client for the upstream KCLArtifact (a fake
// because these steps only read it; the envtest suites drive the same steps through the API
// server).

// stepReconciler is a reconciler with a store of its own and the upstreams objs.
func stepReconciler(t *testing.T, objs ...*kclv1.KCLArtifact) *KCLArtifactReconciler {
	t.Helper()
	store, err := artifactstore.New(&artcfg.Options{StoragePath: t.TempDir(), StorageAddress: "127.0.0.1:1",
		StorageAdvAddress: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := kclv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme)
	for _, o := range objs {
		b = b.WithObjects(o)
	}
	return &KCLArtifactReconciler{Client: b.Build(), EventRecorder: record.NewFakeRecorder(32), Store: store}
}

func newObject(name string, uid string) *kclv1.KCLArtifact {
	return &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name, UID: types.UID(uid), Generation: 1}}
}

// storeArtifact stores content as obj's artifact rendered from sourceRevision.
func storeArtifact(t *testing.T, r *KCLArtifactReconciler, obj *kclv1.KCLArtifact, content string) *meta.Artifact {
	t.Helper()
	c := artifactstore.NewContent()
	if _, err := c.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	art, err := r.Store.StoreFiles(obj, "main", []artifactstore.File{{Name: "manifests.yaml", Content: c}})
	if err != nil {
		t.Fatal(err)
	}
	return art
}

func entry(art *meta.Artifact, sourceRevision, health string) kclv1.ArtifactHistoryEntry {
	e := kclv1.ArtifactHistoryEntry{Digest: art.Digest, Revision: art.Revision, URL: art.URL, Size: art.Size,
		SourceRevision: sourceRevision, Health: health, LastPublished: metav1.Now()}
	if health == kclv1.HealthHealthy {
		e.HealthyAt = &metav1.Time{Time: time.Now().Add(-time.Hour)}
	}
	return e
}

// The history step keeps historyLimit entries, and beyond them the rollback target; keeps
// historyLimit waiting artifacts, the newest; marks what storage lost; and removes the files
// nothing lists any more (the retention TTL is zero here).
func TestHistoryStepKeepsWhatTheLimitSays(t *testing.T) {
	r := stepReconciler(t)
	obj := newObject("app", "uid-app")
	obj.Spec.HistoryLimit = ptr.To(2)
	obj.Spec.Remediation = &kclv1.Remediation{}
	var arts []*meta.Artifact
	for _, name := range []string{"d", "c", "b", "a", "w1", "w2", "w3"} {
		arts = append(arts, storeArtifact(t, r, obj, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "+name+"\n"))
	}
	obj.Status.Artifact = arts[0]
	obj.Status.History = []kclv1.ArtifactHistoryEntry{
		entry(arts[0], "main@sha1:d", kclv1.HealthFailed),
		entry(arts[1], "main@sha1:c", kclv1.HealthFailed),
		entry(arts[2], "main@sha1:b", kclv1.HealthNotApplied),
		entry(arts[3], "main@sha1:a", kclv1.HealthHealthy), // the rollback target
	}
	obj.Status.Promotion = &kclv1.PromotionStatus{}
	for _, a := range arts[4:] {
		obj.Status.Promotion.Waiting = append(obj.Status.Promotion.Waiting, kclv1.WaitingArtifact{Digest: a.Digest,
			Revision: a.Revision, URL: a.URL, Size: a.Size, SourceRevision: "main@sha1:w"})
	}

	if err := r.reconcileHistory(context.Background(), obj, &pipeline{}); err != nil {
		t.Fatalf("history step: %v", err)
	}
	var digests []string
	for _, e := range obj.Status.History {
		digests = append(digests, e.Digest)
	}
	if want := []string{arts[0].Digest, arts[1].Digest, arts[3].Digest}; !equalStrings(digests, want) {
		t.Errorf("history %v, want the limit and the rollback target %v", digests, want)
	}
	if w := obj.Status.Promotion.Waiting; len(w) != 2 || w[0].Digest != arts[4].Digest || w[1].Digest != arts[5].Digest {
		t.Errorf("waiting %+v, want the two newest", w)
	}
	for i, a := range arts {
		kept := i != 2 && i != 6
		if got := r.Store.Holds(obj, a); got != kept {
			t.Errorf("artifact %d stored: %v, want %v", i, got, kept)
		}
	}

	// the artifact served, made current by a reconcile whose publish then failed, is not listed
	// yet: it stays stored all the same
	served := storeArtifact(t, r, obj, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: served\n")
	obj.Status.Artifact = served
	// after a restart: the store walks the directory again instead of trusting its last walk
	restarted, err := artifactstore.New(&artcfg.Options{StoragePath: r.Store.BasePath, StorageAddress: "127.0.0.1:1",
		StorageAdvAddress: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	r.Store = restarted
	if err := r.reconcileHistory(context.Background(), obj, &pipeline{}); err != nil {
		t.Fatal(err)
	}
	if !r.Store.Holds(obj, served) {
		t.Error("the history step removed the artifact served")
	}

	// a kept file lost: listed, and marked missing
	if err := os.Remove(r.Store.LocalPath(*arts[1])); err != nil {
		t.Fatal(err)
	}
	if err := r.reconcileHistory(context.Background(), obj, &pipeline{}); err != nil {
		t.Fatal(err)
	}
	if h := obj.Status.History; len(h) != 3 || !h[1].Missing || h[0].Missing || h[2].Missing {
		t.Errorf("missing marks: %+v", h)
	}
}

// The promotion step: without spec.promotion the render is published and a stage's records go;
// a stage holds its render back until its gates open, promotes what the upstream recorded
// healthy, and goes past a failed render only beside an artifact that waits.
func TestPromotionStep(t *testing.T) {
	upstream := newObject("dev", "uid-dev")
	r := stepReconciler(t, upstream)
	ctx := context.Background()
	stage := newObject("prod", "uid-prod")
	stage.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "dev"}}
	in := &inputs{digest: "hmac-sha256:in1", source: meta.Artifact{Revision: "main@sha1:one"}}
	art := storeArtifact(t, r, stage, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: one\n")

	// the upstream has not run these inputs: the render waits, nothing is published
	p := &pipeline{in: in, rendered: &rendered{art: art}}
	if err := r.reconcilePromotion(ctx, stage, p); err != nil {
		t.Fatal(err)
	}
	if stage.Status.Artifact != nil || p.published || len(stage.Status.Promotion.Waiting) != 1 || p.rendered != nil {
		t.Fatalf("published before its gates opened: %+v", stage.Status)
	}
	if c := conditions.Get(stage, kclv1.PromotedCondition); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Promoted: %+v", c)
	}

	// a failed render beside what waits: the step goes on, the failure stays the news
	renderErr := kreconcile.Failf(kclv1.RenderFailedReason, "boom")
	p = &pipeline{renderErr: renderErr}
	if err := r.reconcilePromotion(ctx, stage, p); err != nil {
		t.Fatalf("a failed render beside a waiting artifact stopped the promotion: %v", err)
	}

	// the upstream ran the same source revision healthy, as its recorded history says
	upArt := storeArtifact(t, r, upstream, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: up\n")
	if err := r.Store.RecordHistory(upstream, []kclv1.ArtifactHistoryEntry{entry(upArt, "main@sha1:one", kclv1.HealthHealthy)}, nil); err != nil {
		t.Fatal(err)
	}
	p = &pipeline{}
	if err := r.reconcilePromotion(ctx, stage, p); err != nil {
		t.Fatal(err)
	}
	if !p.published || p.promoted == nil || stage.Status.Artifact == nil || stage.Status.Artifact.Digest != art.Digest {
		t.Fatalf("not promoted: %+v", stage.Status)
	}
	if len(stage.Status.Promotion.Waiting) != 0 || stage.Status.InputDigest != in.digest || p.promoted.record.Upstream != "dev" {
		t.Errorf("after the promotion: %+v %+v", stage.Status.Promotion, p.promoted.record)
	}

	// nothing waits: a failed render is the reconcile's failure
	if err := r.reconcilePromotion(ctx, stage, &pipeline{renderErr: renderErr}); !errors.Is(err, renderErr) {
		t.Errorf("a failed render with nothing waiting: %v", err)
	}

	// spec.promotion removed: the stage step drops the stage's records before the inputs step
	// asks whether their artifact waits (it renders and publishes as a plain KCLArtifact's), and
	// the promotion step passes a failed render on as the reconcile's failure
	stage.Spec.Promotion = nil
	stage.Status.Promotion = &kclv1.PromotionStatus{Waiting: []kclv1.WaitingArtifact{{Digest: "sha256:x", InputDigest: in.digest}}}
	if err := r.reconcileStage(ctx, stage, &pipeline{}); err != nil {
		t.Fatal(err)
	}
	if stage.Status.Promotion != nil || conditions.Has(stage, kclv1.PromotedCondition) || r.waitingFor(stage, in.digest) {
		t.Errorf("a plain KCLArtifact keeps a stage's records: %+v", stage.Status.Promotion)
	}
	if err := r.reconcilePromotion(ctx, stage, &pipeline{renderErr: renderErr}); !errors.Is(err, renderErr) {
		t.Errorf("a plain KCLArtifact's failed render: %v", err)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// status.history leaves out the revisions kclv1.HistoryRevision gives: they are the ones the
// store names the render step's artifacts with.
func TestRevisionRefIsTheHistorysRule(t *testing.T) {
	r := stepReconciler(t)
	obj := newObject("app", "uid-1")
	c := artifactstore.NewContent()
	if _, err := c.Write([]byte("kind: ConfigMap\n")); err != nil {
		t.Fatal(err)
	}
	for _, rev := range []string{"main@sha1:abc", "refs/tags/v1@sha1:abc", "v1.2.3@sha256:abc", "sha256:abc", "@sha1:abc", ""} {
		art, err := r.Store.StoreFiles(obj, kclv1.RevisionRef(rev), []artifactstore.File{{Name: "manifests.yaml", Content: c}})
		if err != nil {
			t.Fatal(err)
		}
		if want := kclv1.HistoryRevision(rev, art.Digest); art.Revision != want {
			t.Errorf("%q: the store names %q, the history derives %q", rev, art.Revision, want)
		}
	}
}
