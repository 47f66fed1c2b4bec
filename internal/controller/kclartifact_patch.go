package controller

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/patch"
)

// newStatusPatcher is the status patcher of a reconciliation: condition messages quote
// revisions, Kustomization statuses and programs, which tenants write, and are cleaned before
// they are sent.
func newStatusPatcher(obj *kclv1.KCLArtifact, c client.Client, fieldOwner string, owned []string) *patch.StatusPatcher {
	return patch.NewStatusPatcher(obj, c, fieldOwner, owned, patch.WithConditionMessages(clean))
}
