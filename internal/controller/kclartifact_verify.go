package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promcheck"
	"github.com/kcl-flux/kcl-artifact-controller/internal/remediation"
)

// defaultVerifyInterval is spec.verify.interval's default.
const defaultVerifyInterval = 30 * time.Second

// reconcileVerify runs the checks of spec.verify on the artifact served once kustomize-controller
// says it is healthy, every interval until the duration has passed, and records each check's
// verdict on its history entry. A check that failed failureLimit times fails the artifact: it is
// rolled back where spec.remediation is set. A Prometheus that cannot be read counts neither way:
// the verification waits, and says why.
func (r *KCLArtifactReconciler) reconcileVerify(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	spec := obj.Spec.Verify
	if spec == nil {
		conditions.Delete(obj, kclv1.VerifiedCondition)
		return nil
	}
	e := servedEntry(obj)
	if e == nil {
		return nil
	}
	if e.Health != kclv1.HealthHealthy || e.HealthyAt == nil {
		if e.Verification == nil {
			conditions.MarkUnknown(obj, kclv1.VerifiedCondition, kclv1.VerifyingReason, "the checks start once %s is healthy", e.Revision)
		}
		return nil
	}
	v := e.Verification
	if v == nil {
		v = &kclv1.Verification{Result: kclv1.VerificationRunning, StartedAt: *e.HealthyAt,
			EndsAt: metav1.NewTime(e.HealthyAt.Add(spec.Duration.Duration))}
		e.Verification = v
	}
	switch v.Result {
	case kclv1.VerificationPassed:
		conditions.MarkTrue(obj, kclv1.VerifiedCondition, kclv1.VerificationPassedReason, "%s passed its checks for %s", e.Revision, spec.Duration.Duration)
		return nil
	case kclv1.VerificationFailed:
		conditions.MarkFalse(obj, kclv1.VerifiedCondition, kclv1.VerificationFailedReason, "%s failed its checks: %s", e.Revision, checksText(v))
		// served still: the rollback failed (it is tried again), or spec.remediation came later
		return r.rollBackFailed(ctx, obj, p, v)
	}
	interval := defaultVerifyInterval
	if spec.Interval != nil && spec.Interval.Duration >= time.Second {
		interval = spec.Interval.Duration
	}
	now := time.Now()
	// lastRunAt is kept in whole seconds: the run was up to a second after it says, and two runs
	// are at least interval apart
	if last := lastRun(v); !last.IsZero() && now.Before(last.Add(interval+time.Second)) {
		p.retryNoLaterThan(last.Add(interval + time.Second))
		return nil
	}
	p.retryNoLaterThan(now.Truncate(time.Second).Add(interval + time.Second))
	compiled, err := r.compileChecks(ctx, obj, spec)
	if err != nil {
		conditions.MarkFalse(obj, kclv1.VerifiedCondition, kclv1.InvalidCheckReason, "%s", clean(err.Error()))
		return nil
	}
	r.runChecks(ctx, obj, v, compiled, now)
	return r.judge(ctx, obj, p, e, spec, now)
}

// compileChecks reads each check's credentials from the KCLArtifact's own namespace and compiles
// it; the first that cannot work is the error.
func (r *KCLArtifactReconciler) compileChecks(ctx context.Context, obj *kclv1.KCLArtifact, spec *kclv1.Verify) ([]*promcheck.Compiled, error) {
	if r.Checks == nil {
		return nil, fmt.Errorf("this controller runs no checks (started without a query runner)")
	}
	out := make([]*promcheck.Compiled, 0, len(spec.Checks))
	for _, c := range spec.Checks {
		check := promcheck.Check{Name: c.Name, Address: c.Prometheus.Address, Query: c.Prometheus.Query, Condition: c.Condition}
		if ref := c.Prometheus.SecretRef; ref != nil {
			data, err := r.secretData(ctx, obj.GetNamespace(), ref.Name)
			if err != nil {
				return nil, fmt.Errorf("check %s: prometheus.secretRef: %w", c.Name, err)
			}
			check.Auth = &promcheck.Auth{Username: string(data["username"]), Password: string(data["password"]),
				BearerToken: string(data["token"]), CA: data["ca.crt"]}
		}
		compiled, err := promcheck.Compile(check)
		if err != nil {
			return nil, fmt.Errorf("check %s: %w", c.Name, err)
		}
		out = append(out, compiled)
	}
	return out, nil
}

// runChecks runs the checks at once and records each one's verdict in v.
func (r *KCLArtifactReconciler) runChecks(ctx context.Context, obj *kclv1.KCLArtifact, v *kclv1.Verification, checks []*promcheck.Compiled, now time.Time) {
	results := make([]promcheck.Result, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() { results[i] = r.Checks.Run(ctx, obj.GetNamespace(), c) })
	}
	wg.Wait()
	at := metav1.NewTime(now.Truncate(time.Second))
	kept := make([]kclv1.CheckStatus, len(checks))
	for i, c := range checks {
		st := kclv1.CheckStatus{Name: c.Name()}
		for _, prev := range v.Checks {
			if prev.Name == c.Name() {
				st = prev
			}
		}
		res := results[i]
		st.Verdict, st.Value, st.LastRunAt, st.Message = string(res.Verdict), res.Value, &at, ""
		switch res.Verdict {
		case promcheck.Passed:
			st.Passes++
		case promcheck.Failed:
			st.Failures++
			st.Message = clean(res.Message)
		default:
			st.Message = clean(res.Message)
		}
		kept[i] = st
	}
	v.Checks = kept
}

// judge decides what the checks' verdicts so far make of the artifact: failed (rolled back
// where spec.remediation is set), verified, or still verifying.
func (r *KCLArtifactReconciler) judge(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline, e *kclv1.ArtifactHistoryEntry, spec *kclv1.Verify, now time.Time) error {
	v := e.Verification
	limit := max(spec.FailureLimit, 1)
	for _, c := range v.Checks {
		if c.Failures >= limit {
			return r.verificationFailed(ctx, obj, p, e, c, limit)
		}
	}
	for _, c := range v.Checks {
		if c.Verdict == string(promcheck.Invalid) {
			conditions.MarkFalse(obj, kclv1.VerifiedCondition, kclv1.InvalidCheckReason, "check %s cannot work as written: %s", c.Name, c.Message)
			return nil
		}
	}
	waiting := ""
	for _, c := range v.Checks {
		if c.Verdict != string(promcheck.Passed) {
			waiting = fmt.Sprintf("check %s: %s", c.Name, c.Message)
			break
		}
	}
	if waiting == "" && !now.Before(v.EndsAt.Time) {
		v.Result = kclv1.VerificationPassed
		conditions.MarkTrue(obj, kclv1.VerifiedCondition, kclv1.VerificationPassedReason, "%s passed its checks for %s", e.Revision, spec.Duration.Duration)
		r.event(obj, eventNormal, kclv1.VerificationPassedReason, fmt.Sprintf("%s passed its checks for %s: %s", e.Revision, spec.Duration.Duration, checksText(v)))
		return nil
	}
	if waiting != "" {
		// neither pass nor fail: nothing is counted, and nothing is rolled back
		conditions.MarkUnknown(obj, kclv1.VerifiedCondition, kclv1.VerificationWaitingReason, "%s; the checks go on until each passes", waiting)
		return nil
	}
	p.retryNoLaterThan(v.EndsAt.Time)
	conditions.MarkUnknown(obj, kclv1.VerifiedCondition, kclv1.VerifyingReason, "%s is checked until %s: %s",
		e.Revision, v.EndsAt.UTC().Format(time.RFC3339), checksText(v))
	return nil
}

// verificationFailed fails the artifact on check c, and rolls it back where spec.remediation is
// set (as after a failed health check; the quarantine keeps it from being published again).
func (r *KCLArtifactReconciler) verificationFailed(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline, e *kclv1.ArtifactHistoryEntry, c kclv1.CheckStatus, limit int) error {
	e.Verification.Result = kclv1.VerificationFailed
	msg := fmt.Sprintf("check %s failed %d of %d allowed times (value %s): %s", c.Name, c.Failures, limit, c.Value, c.Message)
	conditions.MarkFalse(obj, kclv1.VerifiedCondition, kclv1.VerificationFailedReason, "%s failed its checks: %s", e.Revision, msg)
	r.event(obj, eventWarning, kclv1.VerificationFailedReason, fmt.Sprintf("%s failed its checks: %s", e.Revision, msg))
	if !rollsBack(obj) {
		return nil
	}
	return r.rollBackChecked(ctx, obj, p, msg)
}

// rollBackFailed rolls back the served artifact its checks failed, where spec.remediation is set
// and it was not rolled back yet.
func (r *KCLArtifactReconciler) rollBackFailed(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline, v *kclv1.Verification) error {
	if !rollsBack(obj) || remediation.RolledBack(obj) != nil {
		return nil
	}
	return r.rollBackChecked(ctx, obj, p, "failed its checks: "+checksText(v))
}

// rollsBack tells whether a failed verification rolls the artifact back: spec.remediation is set,
// no pin holds it, and a Kustomization applies what is published.
func rollsBack(obj *kclv1.KCLArtifact) bool {
	return obj.Spec.Remediation != nil && obj.Spec.PinnedDigest == "" && obj.KustomizationEnabled()
}

// rollBackChecked rolls back the served artifact for its failed checks, msg saying why.
func (r *KCLArtifactReconciler) rollBackChecked(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline, msg string) error {
	failure := &kclv1.ArtifactFailure{Reason: kclv1.VerificationFailedReason, Message: clean(msg), At: metav1.Now()}
	return r.rollBack(ctx, obj, failure, p.rejections, p.sensitive())
}

func lastRun(v *kclv1.Verification) time.Time {
	var last time.Time
	for _, c := range v.Checks {
		if c.LastRunAt != nil && c.LastRunAt.After(last) {
			last = c.LastRunAt.Time
		}
	}
	return last
}

// checksText is each check's last verdict and value, for messages.
func checksText(v *kclv1.Verification) string {
	if len(v.Checks) == 0 {
		return "not run yet"
	}
	parts := make([]string, len(v.Checks))
	for i, c := range v.Checks {
		parts[i] = fmt.Sprintf("%s %s (%s)", c.Name, strings.ToLower(c.Verdict), c.Value)
	}
	return strings.Join(parts, ", ")
}
