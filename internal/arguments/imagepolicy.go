package arguments

import (
	"context"
	"fmt"

	"github.com/fluxcd/pkg/apis/meta"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputexpr"
)

// ImagePolicyState is what a render reads of an ImagePolicy (image.toolkit.fluxcd.io/v1): the
// generation, the one its status observed, the image selected and its Ready condition (times
// left out). Equal states read the same arguments: the controller's watch compares them.
type ImagePolicyState struct {
	Generation, Observed int64
	LatestRef            *ImageRef
	// Ready is the Ready condition's status, reason and message; nil without one.
	Ready *metav1.Condition
}

// ImageRef is the image an ImagePolicy selected.
type ImageRef struct {
	Name   string `json:"name"`
	Tag    string `json:"tag"`
	Digest string `json:"digest,omitempty"`
}

// ImagePolicyStateOf reads the state of an ImagePolicy read as unstructured.
func ImagePolicyStateOf(u *unstructured.Unstructured) ImagePolicyState {
	var status struct {
		ObservedGeneration int64              `json:"observedGeneration,omitempty"`
		LatestRef          *ImageRef          `json:"latestRef,omitempty"`
		Conditions         []metav1.Condition `json:"conditions,omitempty"`
	}
	if raw, ok := u.Object["status"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &status)
	}
	st := ImagePolicyState{Generation: u.GetGeneration(), Observed: status.ObservedGeneration, LatestRef: status.LatestRef}
	if c := apimeta.FindStatusCondition(status.Conditions, meta.ReadyCondition); c != nil {
		st.Ready = &metav1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message}
	}
	return st
}

// readImagePolicy reads the image an ImagePolicy selected as <as>.image, .name, .tag, .digest.
func (g *Gatherer) readImagePolicy(ctx context.Context, ns string, ref kclv1.ArgumentsReference) (map[string]argument, error) {
	if g.NoImagePolicies {
		return nil, refError(kclv1.InputNotReadyReason, ref,
			"the API server does not serve %s (install Flux's image-reflector-controller, then restart this controller)", ImagePolicy.GroupVersion())
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(ImagePolicy)
	err := g.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, u)
	if apierrors.IsNotFound(err) {
		if ref.Optional {
			return nil, nil
		}
		return nil, refError(kclv1.InputNotReadyReason, ref, "not found in namespace %s", ns)
	}
	if err != nil {
		return nil, fmt.Errorf("argumentsFrom ImagePolicy %s: %w", ref.Name, err)
	}
	st := ImagePolicyStateOf(u)
	ready := st.Ready
	switch {
	case st.LatestRef == nil || st.LatestRef.Tag == "":
		if ref.Optional {
			return nil, nil
		}
		return nil, refError(kclv1.InputNotReadyReason, ref, "has not selected an image yet%s", conditionText(ready))
	case ready == nil || ready.Status != metav1.ConditionTrue:
		return nil, refError(kclv1.InputNotReadyReason, ref, "is not ready%s", conditionText(ready))
	case st.Observed != st.Generation:
		return nil, refError(kclv1.InputNotReadyReason, ref, "has not observed its generation %d yet", u.GetGeneration())
	}
	return imageArguments(ref, st.LatestRef.Name, st.LatestRef.Tag, st.LatestRef.Digest), nil
}

func conditionText(c *metav1.Condition) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
}

// imageArguments names the selected image's parts. The values are strings in KCL whatever
// they look like: a tag 1.10 is never the number 1.1.
func imageArguments(ref kclv1.ArgumentsReference, name, tag, digest string) map[string]argument {
	prefix := ref.As
	if prefix == "" {
		prefix = ref.Name
	}
	image := name + ":" + tag
	if digest != "" {
		image += "@" + digest
	}
	out := map[string]argument{}
	for k, v := range map[string]string{"image": image, "name": name, "tag": tag, "digest": digest} {
		out[prefix+"."+k] = argument{value: inputexpr.Quote(v), text: v}
	}
	return out
}
