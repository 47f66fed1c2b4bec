package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// badOutcome is what the demo shows of the bad release: healthy by kustomize-controller's
// check, failing dev's error-rate check, rolled back, never promoted.
type badOutcome struct {
	tag                       string
	healthyAfter, rolledAfter time.Duration // from the push
	checks                    string        // the failed entry's verification
	remediated                string        // dev's Remediated condition
	stagingGate               string        // staging's gate on it, when it rendered it ahead
}

// badRelease pushes the tag after good as an image the exporter plays answering half of its
// requests with 500, and waits until dev published it, found it healthy, failed its checks and
// rolled back to good's artifact; staging must never have published it.
func (d *demo) badRelease(reg *fluxenv.Registry, good *deliveryOutcome) (*badOutcome, error) {
	b := &badOutcome{tag: bumpMinor(good.tag)}
	pushed, err := d.pushTag(reg, b.tag, badRatio)
	if err != nil {
		return nil, err
	}
	dev := &kclv1.KCLArtifact{}
	get := func(ctx context.Context, name string, obj *kclv1.KCLArtifact) error {
		return d.c.Get(ctx, client.ObjectKey{Namespace: deliveryNS, Name: name}, obj)
	}
	if err := d.wait(fmt.Sprintf("KCLArtifact %s/%s publishing tag %s, healthy (applied)", deliveryNS, stages[0].name, b.tag), kclController,
		func(ctx context.Context) (bool, string, error) {
			if err := get(ctx, stages[0].name, dev); err != nil {
				return false, "", err
			}
			e := entryOfTag(dev.Status.History, b.tag)
			if e == nil || e.HealthyAt == nil {
				return false, readyState(dev.Status.Conditions, dev.Generation, dev.Status.ObservedGeneration), nil
			}
			return true, fmt.Sprintf("%s, healthy at %s; the exporter plays it with error ratio %s", e.Revision, e.HealthyAt.Format(time.TimeOnly), badRatio), nil
		}); err != nil {
		return nil, err
	}
	b.healthyAfter = time.Since(pushed)
	if err := d.wait(fmt.Sprintf("KCLArtifact %s/%s failing the checks of tag %s and rolling back to %s", deliveryNS, stages[0].name, b.tag, good.tag), kclController,
		func(ctx context.Context) (bool, string, error) {
			if err := get(ctx, stages[0].name, dev); err != nil {
				return false, "", err
			}
			e := entryOfTag(dev.Status.History, b.tag)
			if e == nil {
				return false, "its entry left the history", nil
			}
			state := checksText(e.Verification)
			failed := e.Verification != nil && e.Verification.Result == kclv1.VerificationFailed
			if !failed || dev.Status.Artifact == nil || dev.Status.Artifact.Digest != good.devDigest {
				return false, state, nil
			}
			b.checks = state
			if c := apimeta.FindStatusCondition(dev.Status.Conditions, kclv1.RemediatedCondition); c != nil {
				b.remediated = c.Reason + ": " + c.Message
			}
			return true, state, nil
		}); err != nil {
		return nil, err
	}
	b.rolledAfter = time.Since(pushed)
	// staging's soak alone holds the bad release for a while: wait until staging's gate says it
	// never comes (dev saw it fail), then check it was never published
	staging := &kclv1.KCLArtifact{}
	if err := d.wait(fmt.Sprintf("KCLArtifact %s/%s holding tag %s for good (UpstreamFailed)", deliveryNS, stages[1].name, b.tag), kclController,
		func(ctx context.Context) (bool, string, error) {
			if err := get(ctx, stages[1].name, staging); err != nil {
				return false, "", err
			}
			if e := entryOfTag(staging.Status.History, b.tag); e != nil {
				return false, "", fmt.Errorf("KCLArtifact %s/%s published the bad release %s (%s)", deliveryNS, stages[1].name, b.tag, e.Revision)
			}
			g := upstreamGateOf(staging, b.tag)
			if g == nil || g.Open || !strings.Contains(g.Message, "never promoted") {
				return false, waitingState(staging), nil
			}
			b.stagingGate = g.Name + ": " + g.Message
			return true, b.stagingGate, nil
		}); err != nil {
		return nil, err
	}
	return b, nil
}

// upstreamGateOf is the upstream gate of the artifact obj holds back for tag, nil when none does.
func upstreamGateOf(obj *kclv1.KCLArtifact, tag string) *kclv1.GateStatus {
	if obj.Status.Promotion == nil {
		return nil
	}
	for _, w := range obj.Status.Promotion.Waiting {
		if inputValue(w.Inputs, policyName+".tag") != tag {
			continue
		}
		for i := range w.Gates {
			if w.Gates[i].Name == kclv1.GateUpstream {
				return &w.Gates[i]
			}
		}
	}
	return nil
}

// entryOfTag is the history entry rendered with tag, nil when there is none.
func entryOfTag(h []kclv1.ArtifactHistoryEntry, tag string) *kclv1.ArtifactHistoryEntry {
	for i := range h {
		if inputValue(h[i].Inputs, policyName+".tag") == tag {
			return &h[i]
		}
	}
	return nil
}

// bumpMinor is 1.<n+1>.0 for 1.<n>.0.
func bumpMinor(tag string) string {
	parts := strings.Split(tag, ".")
	n, _ := strconv.Atoi(parts[1])
	return fmt.Sprintf("1.%d.0", n+1)
}

// checksText describes a verification: its result and each check's last verdict and value.
func checksText(v *kclv1.Verification) string {
	if v == nil {
		return "not started"
	}
	var checks []string
	for _, c := range v.Checks {
		s := fmt.Sprintf("%s %s", c.Name, c.Verdict)
		if c.Value != "" {
			s += " (value " + c.Value + ")"
		}
		s += fmt.Sprintf(", %d passed, %d failed", c.Passes, c.Failures)
		checks = append(checks, s)
	}
	return v.Result + ": " + strings.Join(checks, "; ")
}

// badText is the closing text's lines on the bad release.
func badText(b *badOutcome) string {
	if b == nil {
		return ""
	}
	s := fmt.Sprintf(`
Then a bad release: tag %[1]s, an image the exporter plays with error ratio %[2]s (that share of
its requests answered 500)
(no Pods run here: the dev cluster's Prometheus scrapes an exporter that follows podinfo-dev's image).
After the push:

  %-8[3]s podinfo-dev published it, healthy by kustomize-controller's check
  %-8[4]s podinfo-dev's checks failed and it rolled back: %[5]s
           %[6]s
`, b.tag, badRatio, b.healthyAfter.Round(100*time.Millisecond).String(), b.rolledAfter.Round(100*time.Millisecond).String(),
		b.checks, b.remediated)
	return s + "  never    podinfo-staging published it; its gate " + b.stagingGate + "\n"
}
