package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promotion"
)

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// lineStop is the stop that holds the stages of namespace ns: the one on the controller's own
// namespace (every namespace's line), else the one on ns; nil while the line runs. The
// Namespaces are read from the cache, as their metadata only (watchLine).
func (r *KCLArtifactReconciler) lineStop(ctx context.Context, ns string) (*promotion.Stop, error) {
	for _, at := range []struct{ name, scope string }{
		{r.RuntimeNamespace, "every namespace, on namespace " + r.RuntimeNamespace},
		{ns, "namespace " + ns},
	} {
		if at.name == "" {
			continue
		}
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
		err := r.Get(ctx, client.ObjectKey{Name: at.name}, m)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		a := m.GetAnnotations()
		reason, stopped := a[kclv1.StopTheLineAnnotation]
		if !stopped {
			continue
		}
		stop := &promotion.Stop{Scope: at.scope, Reason: clean(reason), By: clean(a[kclv1.StoppedByAnnotation])}
		if t, err := time.Parse(time.RFC3339, a[kclv1.StoppedAtAnnotation]); err == nil {
			stop.At = t
		}
		return stop, nil
	}
	return nil, nil
}
