package controller

import (
	"context"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// testCache is the manager's cache; cacheUse records every informer it was asked for or read
// from. Every informer controller-runtime starts is started through one of these calls (a watch,
// a cached Get or List of a type it has no informer for yet), so a kind the controller must hold
// as metadata only shows here the moment anything reads or watches it typed.
var (
	testCache cache.Cache
	cacheUse  cacheRecorder
)

// apiReads counts the reconciler's reads from the API server per object, as writes counts its
// writes.
var apiReads writeCounter

type countingReader struct{ client.Reader }

func (c countingReader) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	err := c.Reader.Get(ctx, key, o, opts...)
	o.SetNamespace(key.Namespace)
	o.SetName(key.Name)
	apiReads.add(o, "")
	return err
}

func recordCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	testCache = recordingCache{Cache: c}
	return testCache, nil
}

type cacheRecorder struct {
	mu   sync.Mutex
	seen map[string]bool
}

// form is how an informer holds its objects: "typed", "metadata" or "unstructured", then the kind.
func (r *cacheRecorder) add(form, kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	r.seen[form+" "+kind] = true
}

func (r *cacheRecorder) has(form, kind string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[form+" "+kind]
}

type recordingCache struct{ cache.Cache }

func (c recordingCache) record(o client.Object) {
	switch o.(type) {
	case *metav1.PartialObjectMetadata:
		cacheUse.add("metadata", o.GetObjectKind().GroupVersionKind().Kind)
	case *unstructured.Unstructured:
		cacheUse.add("unstructured", o.GetObjectKind().GroupVersionKind().Kind)
	default:
		gvk, err := apiutil.GVKForObject(o, testScheme())
		if err == nil {
			cacheUse.add("typed", gvk.Kind)
		}
	}
}

func (c recordingCache) recordList(l client.ObjectList) {
	kind := strings.TrimSuffix(l.GetObjectKind().GroupVersionKind().Kind, "List")
	switch l.(type) {
	case *metav1.PartialObjectMetadataList:
		cacheUse.add("metadata", kind)
	case *unstructured.UnstructuredList:
		cacheUse.add("unstructured", kind)
	default:
		if gvk, err := apiutil.GVKForObject(l, testScheme()); err == nil {
			cacheUse.add("typed", strings.TrimSuffix(gvk.Kind, "List"))
		}
	}
}

func (c recordingCache) Get(ctx context.Context, key client.ObjectKey, o client.Object, opts ...client.GetOption) error {
	c.record(o)
	return c.Cache.Get(ctx, key, o, opts...)
}

func (c recordingCache) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	c.recordList(l)
	return c.Cache.List(ctx, l, opts...)
}

func (c recordingCache) GetInformer(ctx context.Context, o client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	c.record(o)
	return c.Cache.GetInformer(ctx, o, opts...)
}

func (c recordingCache) IndexField(ctx context.Context, o client.Object, field string, extract client.IndexerFunc) error {
	c.record(o)
	return c.Cache.IndexField(ctx, o, field, extract)
}

func (c recordingCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	cacheUse.add("typed", gvk.Kind)
	return c.Cache.GetInformerForKind(ctx, gvk, opts...)
}
