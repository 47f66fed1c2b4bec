package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	artcfg "github.com/fluxcd/pkg/artifact/config"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
)

func TestRedact(t *testing.T) {
	args := []render.Argument{{Name: "password", Value: "hunter2"}, {Name: "n", Value: "ab"}}
	for _, tc := range []struct{ in, want string }{
		{"expected int, got hunter2", "expected int, got ***"},
		{"hunter2 and hunter2", "*** and ***"},
		// two characters would redact half of every message: values that short are left
		{"ab is a tab", "ab is a tab"},
		{"nothing to hide", "nothing to hide"},
	} {
		if got := redact(tc.in, args); got != tc.want {
			t.Errorf("redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// keyedStore is a store in a scratch directory, for its digest key.
func keyedStore(t testing.TB) *artifactstore.Store {
	s, err := artifactstore.New(&artcfg.Options{StoragePath: t.TempDir(), StorageAddress: "x:1", StorageAdvAddress: "x:1"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestInputDigest(t *testing.T) {
	store := keyedStore(t)
	base := func() *kclv1.KCLArtifact {
		return &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
			Spec: kclv1.KCLArtifactSpec{Path: "app", Overrides: []string{"a=1"}}}
	}
	args := []render.Argument{{Name: "env", Value: "prod"}, {Name: "pin", Value: "4821"}}
	ref := inputDigest(store.Keyed, "sha256:src", base(), args, "0.12.1")
	if !strings.HasPrefix(ref, "hmac-sha256:") {
		t.Errorf("digest %s: want a keyed one", ref)
	}
	for name, tc := range map[string]struct {
		keyed       keyedFunc
		src, engine string
		obj         *kclv1.KCLArtifact
		args        []render.Argument
		same        bool
	}{
		"identical inputs": {store.Keyed, "sha256:src", "0.12.1", base(), args, true},
		"interval and suspend do not render differently": {store.Keyed, "sha256:src", "0.12.1",
			func() *kclv1.KCLArtifact {
				o := base()
				o.Spec.Suspend, o.Spec.Interval = true, metav1.Duration{Duration: 7}
				return o
			}(), args, true},
		"another KCLArtifact of the namespace (renders are shared)": {store.Keyed, "sha256:src", "0.12.1",
			func() *kclv1.KCLArtifact { o := base(); o.Name = "api"; return o }(), args, true},
		"another source":    {store.Keyed, "sha256:other", "0.12.1", base(), args, false},
		"another engine":    {store.Keyed, "sha256:src", "0.13.0", base(), args, false},
		"another path":      {store.Keyed, "sha256:src", "0.12.1", func() *kclv1.KCLArtifact { o := base(); o.Spec.Path = "b"; return o }(), args, false},
		"another override":  {store.Keyed, "sha256:src", "0.12.1", func() *kclv1.KCLArtifact { o := base(); o.Spec.Overrides = nil; return o }(), args, false},
		"a flag":            {store.Keyed, "sha256:src", "0.12.1", func() *kclv1.KCLArtifact { o := base(); o.Spec.SortKeys = true; return o }(), args, false},
		"an argument value": {store.Keyed, "sha256:src", "0.12.1", base(), []render.Argument{{Name: "env", Value: "dev"}, args[1]}, false},
		// the Secret rotated: rendered again
		"a Secret's new value": {store.Keyed, "sha256:src", "0.12.1", base(), []render.Argument{args[0], {Name: "pin", Value: "4822"}}, false},
		"no arguments":         {store.Keyed, "sha256:src", "0.12.1", base(), nil, false},
		"another namespace": {store.Keyed, "sha256:src", "0.12.1",
			func() *kclv1.KCLArtifact { o := base(); o.Namespace = "tenant-b"; return o }(), args, false},
		// a lost storage volume: everything renders again
		"another key": {keyedStore(t).Keyed, "sha256:src", "0.12.1", base(), args, false},
	} {
		got := inputDigest(tc.keyed, tc.src, tc.obj, tc.args, tc.engine)
		if (got == ref) != tc.same {
			t.Errorf("%s: digest %s, reference %s, want same=%v", name, got, ref, tc.same)
		}
	}
	// a restart that keeps the storage keeps the key, and so the digest: nothing to render
	again, err := artifactstore.New(&artcfg.Options{StoragePath: store.BasePath, StorageAddress: "x:1", StorageAdvAddress: "x:1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := inputDigest(again.Keyed, "sha256:src", base(), args, "0.12.1"); got != ref {
		t.Errorf("after a restart: %s, want %s", got, ref)
	}
}

// BenchmarkInputDigest is the cost of a reconcile's input digest, keyed (HMAC-SHA256 under the
// storage's key, issue 54) and as it was (SHA-256), for a spec of ten arguments.
func BenchmarkInputDigest(b *testing.B) {
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: kclv1.KCLArtifactSpec{Path: "deploy/web", Entries: []string{"main.k"}}}
	var args []render.Argument
	for i := range 10 {
		args = append(args, render.Argument{Name: fmt.Sprintf("arg%d", i), Value: strings.Repeat("v", 40)})
	}
	src := "sha256:" + strings.Repeat("ab", 32)
	unkeyed := func(_ string, parts ...string) string {
		sum := sha256.Sum256([]byte(parts[len(parts)-1]))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	for name, keyed := range map[string]keyedFunc{"keyed": keyedStore(b).Keyed, "unkeyed": unkeyed} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = inputDigest(keyed, src, obj, args, "0.12.1")
			}
		})
	}
}

func TestKustomizationSpec(t *testing.T) {
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns"},
		Spec: kclv1.KCLArtifactSpec{Interval: metav1.Duration{Duration: 60e9}}}
	s := kustomization.Spec(obj)
	if s.SourceRef != (kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.ExternalArtifactKind, Name: "app", Namespace: "ns"}) ||
		s.Path != "./" || !s.Prune || s.Interval.Duration != 60e9 || s.Suspend {
		t.Errorf("defaults: %+v", s)
	}
	obj.Spec.Kustomization = &kclv1.KustomizationTemplate{Prune: ptr.To(false), Interval: &metav1.Duration{Duration: 5e9},
		TargetNamespace: "apps", DeletionPolicy: kustomizev1.DeletionPolicyOrphan}
	s = kustomization.Spec(obj)
	if s.Prune || s.Interval.Duration != 5e9 || s.TargetNamespace != "apps" || s.DeletionPolicy != kustomizev1.DeletionPolicyOrphan {
		t.Errorf("from the template: %+v", s)
	}
	if s.RetryInterval != nil {
		t.Errorf("retryInterval %v with none set anywhere, want none (the Kustomization's interval)", s.RetryInterval)
	}
	obj.Spec.RetryInterval = &metav1.Duration{Duration: 10e9}
	if s = kustomization.Spec(obj); s.RetryInterval == nil || s.RetryInterval.Duration != 10e9 {
		t.Errorf("retryInterval %v, want the KCLArtifact's 10s", s.RetryInterval)
	}
	obj.Spec.Kustomization.RetryInterval = &metav1.Duration{Duration: 3e9}
	if s = kustomization.Spec(obj); s.RetryInterval == nil || s.RetryInterval.Duration != 3e9 {
		t.Errorf("retryInterval %v, want the template's 3s", s.RetryInterval)
	}
}

func TestRevisionChanged(t *testing.T) {
	repo := func(a *meta.Artifact) *sourcev1.GitRepository {
		r := &sourcev1.GitRepository{}
		r.Status.Artifact = a
		return r
	}
	a := &meta.Artifact{Revision: "main@sha1:1", Digest: "sha256:1", URL: "http://x/1"}
	p := revisionChanged{}
	for name, tc := range map[string]struct {
		old, new *meta.Artifact
		want     bool
	}{
		"first artifact":   {nil, a, true},
		"no artifact":      {nil, nil, false},
		"same artifact":    {a, a, false},
		"new revision":     {a, &meta.Artifact{Revision: "main@sha1:2", Digest: a.Digest, URL: a.URL}, true},
		"new digest":       {a, &meta.Artifact{Revision: a.Revision, Digest: "sha256:2", URL: a.URL}, true},
		"new URL (a move)": {a, &meta.Artifact{Revision: a.Revision, Digest: a.Digest, URL: "http://y/1"}, true},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: repo(tc.old), ObjectNew: repo(tc.new)}); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: repo(a)}) || p.Create(event.CreateEvent{Object: repo(nil)}) || p.Delete(event.DeleteEvent{Object: repo(a)}) {
		t.Error("create passes with an artifact only; delete never")
	}
}

// listedAs stands in for the cache, whose index returns a source's KCLArtifacts in no order
// (the order of a map); here, in the order given.
type listedAs struct {
	client.Client
	items []kclv1.KCLArtifact
}

func (l listedAs) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*kclv1.KCLArtifactList).Items = l.items
	return nil
}

// TestSourceRequestsInNamespaceOrder: a source's new revision queues its KCLArtifacts namespace
// by namespace, so that a namespace's renders follow each other on its warm worker.
func TestSourceRequestsInNamespaceOrder(t *testing.T) {
	var items []kclv1.KCLArtifact
	for i := range 12 {
		items = append(items, kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{
			Namespace: fmt.Sprintf("ns-%d", i%3), Name: fmt.Sprintf("app-%02d", 11-i)}})
	}
	r := &KCLArtifactReconciler{Client: listedAs{items: items}}
	reqs := r.forSource(sourcev1.GitRepositoryKind)(context.Background(), &sourcev1.GitRepository{})
	if len(reqs) != len(items) {
		t.Fatalf("%d requests for %d KCLArtifacts", len(reqs), len(items))
	}
	for i := 1; i < len(reqs); i++ {
		a, b := reqs[i-1].NamespacedName, reqs[i].NamespacedName
		if a.Namespace > b.Namespace || (a.Namespace == b.Namespace && a.Name > b.Name) {
			t.Fatalf("request %d (%s) queued before %d (%s): %v", i-1, a, i, b, reqs)
		}
	}
}

// atVersion stands in for a reader that has the KCLArtifact at one resourceVersion: the cache
// lagging behind a write, or the API server. (A lagging informer cannot be made to lag on cue.)
type atVersion struct {
	client.Client
	rv    string
	reads *int
}

func (a atVersion) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	*a.reads++
	obj.SetNamespace(key.Namespace)
	obj.SetName(key.Name)
	obj.SetResourceVersion(a.rv)
	return nil
}

// TestReadsAgainWhatTheCacheHasNotSeen: a KCLArtifact older in the cache than this controller's
// last write of it is read from the API server; one the cache has caught up with is not.
func TestReadsAgainWhatTheCacheHasNotSeen(t *testing.T) {
	var cacheReads, apiReads int
	r := &KCLArtifactReconciler{Client: atVersion{rv: "99", reads: &cacheReads}, APIReader: atVersion{rv: "100", reads: &apiReads}}
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	for _, tc := range []struct {
		written, want string
		apiReads      int
	}{
		{"", "99", 0},     // never written: the cache
		{"98", "99", 0},   // the cache has the write, or a later change
		{"99", "99", 0},   // the cache has exactly the write
		{"100", "100", 1}, // the cache is behind the write: read again
		{"x", "99", 0},    // versions that do not compare: the cache
	} {
		apiReads = 0
		r.writes.Forget(key)
		r.writes.Record(key, tc.written)
		obj, err := r.latest(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if obj.ResourceVersion != tc.want || apiReads != tc.apiReads {
			t.Errorf("last write %q: read version %q with %d API reads, want %q with %d", tc.written,
				obj.ResourceVersion, apiReads, tc.want, tc.apiReads)
		}
	}
}
