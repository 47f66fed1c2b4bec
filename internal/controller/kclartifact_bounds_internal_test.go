package controller

import (
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func TestBoundsCapWhatATenantAsksFor(t *testing.T) {
	b := Bounds{MaxTimeout: 10 * time.Minute, MinInterval: 10 * time.Second}
	obj := &kclv1.KCLArtifact{Spec: kclv1.KCLArtifactSpec{
		Interval: metav1.Duration{Duration: time.Millisecond}, Timeout: &metav1.Duration{Duration: 100000 * time.Hour}}}
	if got := b.timeout(obj); got != 10*time.Minute {
		t.Errorf("timeout %s, want the cap", got)
	}
	if got := b.interval(obj); got != 10*time.Second {
		t.Errorf("interval %s, want the floor", got)
	}
	if got := b.retry(obj, 5); got != 10*time.Second {
		t.Errorf("retry after 5 failures %s, want the floor (the interval bounds the backoff)", got)
	}
	obj.Spec.Timeout.Duration = time.Minute
	if got := b.timeout(obj); got != time.Minute {
		t.Errorf("timeout %s, want the KCLArtifact's own under the cap", got)
	}
	if got := (Bounds{}).timeout(obj); got != time.Minute {
		t.Errorf("no cap: timeout %s", got)
	}
}

func TestRetriesBackOffUpToTheInterval(t *testing.T) {
	b := Bounds{MinInterval: time.Second}
	obj := &kclv1.KCLArtifact{Spec: kclv1.KCLArtifactSpec{
		Interval: metav1.Duration{Duration: time.Minute}, RetryInterval: &metav1.Duration{Duration: 5 * time.Second}}}
	var got []time.Duration
	for n := 1; n <= 6; n++ {
		got = append(got, b.retry(obj, n))
	}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("retries %v, want %v", got, want)
		}
	}
}

func TestFailureCountsResetWithANewGeneration(t *testing.T) {
	var f failureCounts
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "n", Generation: 1}}
	f.add(obj)
	if n := f.add(obj); n != 2 {
		t.Fatalf("second failure counted %d", n)
	}
	obj.Generation = 2
	if n := f.add(obj); n != 1 {
		t.Fatalf("a new generation's first failure counted %d", n)
	}
	f.reset(obj)
	if n := f.add(obj); n != 1 {
		t.Fatalf("after a success the next failure counted %d", n)
	}
}

func TestGeneratedKustomizationsAreBounded(t *testing.T) {
	b := Bounds{MaxTimeout: 10 * time.Minute, MinInterval: 10 * time.Second}
	spec := b.kustomization(kustomizev1.KustomizationSpec{Interval: metav1.Duration{Duration: time.Millisecond},
		RetryInterval: &metav1.Duration{Duration: time.Millisecond}, Timeout: &metav1.Duration{Duration: 100 * time.Hour}})
	if spec.Interval.Duration != 10*time.Second || spec.RetryInterval.Duration != 10*time.Second || spec.Timeout.Duration != 10*time.Minute {
		t.Errorf("bounded spec: interval %s, retry %s, timeout %s", spec.Interval.Duration, spec.RetryInterval.Duration, spec.Timeout.Duration)
	}
	// kustomize-controller times out after the interval when no timeout is set: an hour's
	// interval gets the cap, a five minutes' one is left as it is (no change to existing specs)
	if spec = b.kustomization(kustomizev1.KustomizationSpec{Interval: metav1.Duration{Duration: time.Hour}}); spec.Timeout == nil || spec.Timeout.Duration != 10*time.Minute {
		t.Errorf("an hour's interval without timeout: timeout %v", spec.Timeout)
	}
	if spec = b.kustomization(kustomizev1.KustomizationSpec{Interval: metav1.Duration{Duration: 5 * time.Minute}}); spec.Timeout != nil || spec.RetryInterval != nil {
		t.Errorf("a spec within the bounds was changed: %+v", spec)
	}
}
