package controller

import (
	"context"
	"fmt"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
)

func TestRevisionRef(t *testing.T) {
	for in, want := range map[string]string{
		"main@sha1:abc": "main", "v1.2.3@sha256:abc": "v1.2.3", "refs/heads/x@sha1:1": "refs/heads/x",
		"sha256:abc": "latest", "@sha1:abc": "latest", "": "latest",
	} {
		if got := revisionRef(in); got != want {
			t.Errorf("revisionRef(%q) = %q, want %q", in, got, want)
		}
	}
}

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

func TestInputDigest(t *testing.T) {
	base := func() *kclv1.KCLArtifact {
		return &kclv1.KCLArtifact{Spec: kclv1.KCLArtifactSpec{Path: "app", Overrides: []string{"a=1"}}}
	}
	args := []render.Argument{{Name: "env", Value: "prod"}}
	ref := inputDigest("sha256:src", base(), args, "0.12.1")
	for name, tc := range map[string]struct {
		src, engine string
		obj         *kclv1.KCLArtifact
		args        []render.Argument
		same        bool
	}{
		"identical inputs": {"sha256:src", "0.12.1", base(), args, true},
		"interval and suspend do not render differently": {"sha256:src", "0.12.1",
			func() *kclv1.KCLArtifact {
				o := base()
				o.Spec.Suspend, o.Spec.Interval = true, metav1.Duration{Duration: 7}
				return o
			}(), args, true},
		"another source":    {"sha256:other", "0.12.1", base(), args, false},
		"another engine":    {"sha256:src", "0.13.0", base(), args, false},
		"another path":      {"sha256:src", "0.12.1", func() *kclv1.KCLArtifact { o := base(); o.Spec.Path = "b"; return o }(), args, false},
		"another override":  {"sha256:src", "0.12.1", func() *kclv1.KCLArtifact { o := base(); o.Spec.Overrides = nil; return o }(), args, false},
		"a flag":            {"sha256:src", "0.12.1", func() *kclv1.KCLArtifact { o := base(); o.Spec.SortKeys = true; return o }(), args, false},
		"an argument value": {"sha256:src", "0.12.1", base(), []render.Argument{{Name: "env", Value: "dev"}}, false},
		"no arguments":      {"sha256:src", "0.12.1", base(), nil, false},
	} {
		got := inputDigest(tc.src, tc.obj, tc.args, tc.engine)
		if (got == ref) != tc.same {
			t.Errorf("%s: digest %s, reference %s, want same=%v", name, got, ref, tc.same)
		}
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
		r.writes.forget(key)
		r.writes.record(key, tc.written)
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
