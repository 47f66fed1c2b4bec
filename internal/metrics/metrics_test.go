package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSandboxMetricStatesTheConfinement(t *testing.T) {
	RecordSandbox(true, 7)
	if v := testutil.ToFloat64(sandboxGauge.WithLabelValues("7")); v != 1 {
		t.Fatalf("confined: got %v, want 1", v)
	}
	RecordSandbox(false, 7)
	if v := testutil.ToFloat64(sandboxGauge.WithLabelValues("7")); v != 0 {
		t.Fatalf("unconfined: got %v, want 0", v)
	}
}
