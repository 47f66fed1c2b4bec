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
)

// imagePolicyStatus is the part of an ImagePolicy's status that is read (image.toolkit.fluxcd.io/v1).
type imagePolicyStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	LatestRef          *struct {
		Name   string `json:"name"`
		Tag    string `json:"tag"`
		Digest string `json:"digest,omitempty"`
	} `json:"latestRef,omitempty"`
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
	var st imagePolicyStatus
	if raw, ok := u.Object["status"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
	}
	ready := apimeta.FindStatusCondition(st.Conditions, meta.ReadyCondition)
	switch {
	case st.LatestRef == nil || st.LatestRef.Tag == "":
		if ref.Optional {
			return nil, nil
		}
		return nil, refError(kclv1.InputNotReadyReason, ref, "has not selected an image yet%s", conditionText(ready))
	case ready == nil || ready.Status != metav1.ConditionTrue:
		return nil, refError(kclv1.InputNotReadyReason, ref, "is not ready%s", conditionText(ready))
	case st.ObservedGeneration != u.GetGeneration():
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
		out[prefix+"."+k] = argument{value: quote(v), text: v}
	}
	return out
}
