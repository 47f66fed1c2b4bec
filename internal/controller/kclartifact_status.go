package controller

import (
	"context"
	"maps"
	"strings"
	"unicode/utf8"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/patch"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/reconcile/summarize"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

const (
	eventNormal  = corev1.EventTypeNormal
	eventWarning = corev1.EventTypeWarning
	// maxMessage bounds condition and event messages; KCL errors can be long.
	maxMessage = 4000
)

// ownedConditions are the condition types this controller writes on KCLArtifacts.
var ownedConditions = []string{meta.ReadyCondition, meta.ReconcilingCondition, meta.StalledCondition,
	kclv1.KustomizationReadyCondition, kclv1.RemediatedCondition, kclv1.PromotedCondition, kclv1.VerifiedCondition}

// storedMessage is Ready's message when the artifact is served. It does not repeat the
// revision, which status.artifact.revision gives (and the Revision column of kubectl get -o wide,
// and flux kcl get): every status write of a KCLArtifact carries its conditions, and the API
// server's price of a write follows the object's size (docs/benchmarks.md#scale).
const storedMessage = "stored artifact"

// markReady reports the artifact served: Ready=True, and when nothing changed (upToDate), Ready
// as it was when it already said so.
func markReady(obj *kclv1.KCLArtifact, upToDate bool) {
	msg := storedMessage
	if upToDate {
		summarize.Unchanged(obj, kclv1.ArtifactUpToDateReason, msg)
		return
	}
	summarize.Ready(obj, meta.SucceededReason, msg)
}

// markFailed reports a failed step. The message says what still serves when an older artifact does.
func markFailed(obj *kclv1.KCLArtifact, se *kreconcile.Error) {
	msg := clean(se.Error())
	if a := obj.Status.Artifact; a != nil {
		msg += "\n(still serving the last good artifact " + a.Revision + ")"
	}
	summarize.Failed(obj, se, msg)
}

// clean makes a message safe to show wherever it goes: control, bidirectional and invisible
// format characters shown as visible escapes (text cannot clear a screen or read otherwise than
// it is), line breaks and tabs kept, at most maxMessage bytes cut on a character boundary.
// Messages quote programs (a KCL assert's text) and tenant-written revisions and statuses.
func clean(s string) string {
	s = termsafe.Text(s)
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "\n... (truncated)"
}

// oneLine joins a message's lines with " | ", blank ones dropped.
func oneLine(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, " | ")
}

// patchStatus writes finalizers, status and conditions at the end of a reconciliation; once the
// finalizer is removed the object may be gone, which the caller tolerates. ObservedGeneration moves only when the generation was fully handled.
func (r *KCLArtifactReconciler) patchStatus(ctx context.Context, obj *kclv1.KCLArtifact, patcher *patch.StatusPatcher, reconcileErr error) error {
	fullyHandled := reconcileErr == nil && !conditions.IsReconciling(obj)
	if fullyHandled || obj.Spec.Suspend || conditions.IsStalled(obj) {
		obj.Status.ObservedGeneration = obj.GetGeneration()
	}
	err := patcher.Patch(ctx, obj)
	if !obj.GetDeletionTimestamp().IsZero() {
		// The finalizer is gone, and so may the object be: not an error. The patch error can
		// be an aggregate, which apierrors.IsNotFound does not see through.
		err = kerrors.FilterOut(err, apierrors.IsNotFound)
	}
	return err
}

// event records an event; messages are KCL errors or revisions, never values or output. The
// metadata carries Flux's revision keys, prefixed with the API group as notification-controller
// expects: originRevision is the source revision (what commit statuses are posted for), revision
// and digest the artifact's (as source-controller sends them), only when the event is about a
// stored artifact.
func (r *KCLArtifactReconciler) event(obj *kclv1.KCLArtifact, eventType, reason, msg string) {
	r.eventWith(obj, eventType, reason, msg, nil)
}

// eventWith is event with more metadata (keys already prefixed), which wins over the defaults.
func (r *KCLArtifactReconciler) eventWith(obj *kclv1.KCLArtifact, eventType, reason, msg string, extra map[string]string) {
	group := kclv1.GroupVersion.Group + "/"
	metadata := map[string]string{}
	if a := obj.Status.Artifact; eventType == eventNormal && a != nil {
		metadata[group+eventv1.MetaRevisionKey] = a.Revision
		metadata[group+eventv1.MetaDigestKey] = a.Digest
		metadata[group+eventv1.MetaOriginRevisionKey] = obj.Status.SourceRevision
	} else if rev := obj.Status.LastAttemptedRevision; rev != "" {
		metadata[group+eventv1.MetaOriginRevisionKey] = rev
	}
	maps.Copy(metadata, extra)
	// an event is one line: alerts carry it to chats, where a program's line break would start
	// a message of its own
	r.AnnotatedEventf(obj, metadata, eventType, reason, "%s", oneLine(clean(msg)))
}
