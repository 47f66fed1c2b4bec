package summarize

import (
	"errors"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
)

func TestFailuresSetTheConditionsAndTheRetry(t *testing.T) {
	obj := &sourcev1.ExternalArtifact{}
	Progressing(obj)
	if !conditions.IsUnknown(obj, meta.ReadyCondition) || !conditions.IsReconciling(obj) {
		t.Fatalf("a new object in progress: %+v", obj.Status.Conditions)
	}

	stall := reconcile.Stallf("InvalidPath", "bad path")
	Failed(obj, stall, "bad path")
	if !conditions.IsStalled(obj) || conditions.IsReconciling(obj) || conditions.GetReason(obj, meta.ReadyCondition) != "InvalidPath" {
		t.Errorf("stalled: %+v", obj.Status.Conditions)
	}
	if res, err := FailureResult(stall, time.Minute); res.RequeueAfter != 0 || !errors.Is(err, ctrlreconcile.TerminalError(nil)) {
		t.Errorf("a stall is requeued: %+v %v", res, err)
	}

	Progressing(obj)
	fail := reconcile.Failf("RenderFailed", "boom")
	Failed(obj, fail, "boom")
	if conditions.IsStalled(obj) || conditions.GetReason(obj, meta.ReconcilingCondition) != meta.ProgressingWithRetryReason {
		t.Errorf("a failure to retry: %+v", obj.Status.Conditions)
	}
	if res, err := FailureResult(fail, time.Minute); res.RequeueAfter != time.Minute || err != nil {
		t.Errorf("a failure waits for the retry interval: %+v %v", res, err)
	}
	transient := reconcile.As(errors.New("conflict"))
	if _, err := FailureResult(transient, time.Minute); err == nil {
		t.Error("a transient failure goes back to the queue's backoff")
	}
}

func TestUnchangedKeepsWhatReadySaid(t *testing.T) {
	obj := &sourcev1.ExternalArtifact{}
	Ready(obj, meta.SucceededReason, "stored artifact for revision 'a'")
	Unchanged(obj, "ArtifactUpToDate", "stored artifact for revision 'a'")
	if got := conditions.GetReason(obj, meta.ReadyCondition); got != meta.SucceededReason {
		t.Errorf("an unchanged reconcile rewrote Ready's reason: %s", got)
	}
	Unchanged(obj, "ArtifactUpToDate", "stored artifact for revision 'b'")
	if got := conditions.GetReason(obj, meta.ReadyCondition); got != "ArtifactUpToDate" {
		t.Errorf("reason %s", got)
	}
}

func TestRequeueComesNoLaterThanAGateOrACollection(t *testing.T) {
	now := time.Now()
	if d := (Requeue{Interval: time.Hour}).After(); d != time.Hour {
		t.Errorf("interval alone: %s", d)
	}
	if d := (Requeue{Interval: time.Hour, GateOpens: now.Add(time.Minute)}).After(); d > time.Minute+time.Second || d < 59*time.Second {
		t.Errorf("a gate in a minute: %s", d)
	}
	if d := (Requeue{Interval: time.Hour, Collect: now.Add(-time.Minute)}).After(); d != time.Second {
		t.Errorf("a collection overdue waits a second: %s", d)
	}
	if d := (Requeue{GateOpens: now.Add(-time.Minute)}).UntilGate(time.Hour); d != 100*time.Millisecond {
		t.Errorf("an open gate: %s", d)
	}
}
