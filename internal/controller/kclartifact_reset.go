package controller

import (
	"context"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/remediation"
)

// reconcileReset settles remediation before the inputs are read (settleRemediation).
func (r *KCLArtifactReconciler) reconcileReset(_ context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	p.retryAll = settleRemediation(obj)
	return nil
}

// settleRemediation, before the inputs are rendered, ends remediation when asked to
// (reconcile.fluxcd.io/resetAt), when it was turned off, or when the template changed under a
// quarantine. A rolled-back KCLArtifact then renders its inputs again, so that their artifact is
// published and tried. retry tells that the Kustomizations' verdicts so far are not to be
// counted: they are asked for new ones (retryAll).
func settleRemediation(obj *kclv1.KCLArtifact) (retry bool) {
	reset, ok := obj.GetAnnotations()[kclv1.ResetRequestAnnotation]
	requested := ok && reset != obj.Status.LastHandledResetAt
	if requested {
		obj.Status.LastHandledResetAt = reset
	}
	ends, renderAgain := remediation.Reset(obj, requested)
	if !ends {
		return false
	}
	if renderAgain {
		obj.Status.InputDigest = ""
	}
	remediation.Clear(obj)
	return obj.Spec.Remediation != nil
}
