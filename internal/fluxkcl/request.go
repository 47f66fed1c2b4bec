package fluxkcl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// pollInterval is how often a wait reads the object again (flux polls every 2s; the
// controllers here usually answer within one second).
const pollInterval = 500 * time.Millisecond

// ref is one Flux object the verbs request and wait for, of any kind: sources, the KCLArtifact,
// Kustomizations.
type ref struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

func (r ref) String() string { return r.gvk.Kind + " " + r.name }

var (
	kclartifactGVK   = schema.GroupVersionKind{Group: "kcl.contrib.fluxcd.io", Version: "v1alpha1", Kind: "KCLArtifact"}
	kustomizationGVK = schema.GroupVersionKind{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"}
	externalGVK      = schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "ExternalArtifact"}
)

func (r ref) get(ctx context.Context, c client.Client) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	err := c.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: r.name}, u)
	return u, err
}

// requestReconcile sets reconcile.fluxcd.io/requestedAt, as flux reconcile does, and returns
// status.lastHandledReconcileAt as it was before, for waitHandled.
func requestReconcile(ctx context.Context, c client.Client, r ref) (string, error) {
	u, err := r.get(ctx, c)
	if err != nil {
		return "", err
	}
	before := statusString(u, "lastHandledReconcileAt")
	return before, mergePatch(ctx, c, r, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		meta.ReconcileRequestAnnotation: time.Now().Format(time.RFC3339Nano)}}})
}

// mergePatch applies a JSON merge patch to the object r names, of any kind: the verbs' only
// writes (a reconcile request, spec.suspend, spec.pinnedDigest) touch one field each.
func mergePatch(ctx context.Context, c client.Client, r ref, patch map[string]any) error {
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(r.gvk)
	u.SetNamespace(r.namespace)
	u.SetName(r.name)
	return c.Patch(ctx, u, client.RawPatch("application/merge-patch+json", body))
}

// waitHandled waits until the object has handled the newest reconcile request, ours or one made
// after it (kcl-artifact-controller requests its Kustomizations too, which replaces our token),
// and has a verdict: Ready True (nil) or False (the condition's message). A timeout is an error
// naming what was awaited.
func waitHandled(ctx context.Context, c client.Client, r ref, before string) (*unstructured.Unstructured, error) {
	var last *unstructured.Unstructured
	var ready *metav1.Condition
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		u, err := r.get(ctx, c)
		if err != nil {
			return false, err
		}
		last = u
		handled := statusString(u, "lastHandledReconcileAt")
		requested := u.GetAnnotations()[meta.ReconcileRequestAnnotation]
		ready = readyCondition(u)
		observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return handled != before && handled == requested && ready != nil &&
			ready.Status != metav1.ConditionUnknown && observed >= u.GetGeneration(), nil
	})
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return last, fmt.Errorf("timeout waiting for %s in %s namespace to handle the reconcile request", r, r.namespace)
	}
	if err != nil {
		return last, err
	}
	if ready.Status != metav1.ConditionTrue {
		return last, fmt.Errorf("%s reconciliation failed: %s", r.gvk.Kind, truncateHex(ready.Message))
	}
	return last, nil
}

// waitReady requests a reconciliation and waits for its verdict, as flux resume does: a resumed
// object may not reconcile before its interval otherwise.
func waitReady(ctx context.Context, c client.Client, r ref) (*unstructured.Unstructured, error) {
	before, err := requestReconcile(ctx, c, r)
	if err != nil {
		return nil, err
	}
	return waitHandled(ctx, c, r, before)
}

func readyCondition(u *unstructured.Unstructured) *metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var conds []metav1.Condition
	for _, item := range raw {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c); err == nil {
			conds = append(conds, c)
		}
	}
	return apimeta.FindStatusCondition(conds, meta.ReadyCondition)
}

// statusString is a string field of status, "" when absent.
func statusString(u *unstructured.Unstructured, fields ...string) string {
	s, _, _ := unstructured.NestedString(u.Object, append([]string{"status"}, fields...)...)
	return s
}
