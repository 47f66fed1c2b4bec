package fairqueue

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// queueDepth reads kcl_artifact_controller_queue_depth from the registry /metrics serves.
func queueDepth(t *testing.T) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "kcl_artifact_controller_queue_depth" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no queue_depth metric")
	return 0
}

// The queue hands out what was added, and queue_depth follows it.
func TestQueueReportsItsDepth(t *testing.T) {
	q := New(2, 1, func(reconcile.Request) {})("test", workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "app"}}
	q.Add(req)
	if d := queueDepth(t); d != 1 {
		t.Fatalf("queue_depth %v after an Add, want 1", d)
	}
	got, shutdown := q.Get()
	if shutdown || got != req {
		t.Fatalf("Get: %v (shut down %v), want %v", got, shutdown, req)
	}
	if d := queueDepth(t); d != 0 {
		t.Fatalf("queue_depth %v after the Get, want 0", d)
	}
	q.Done(got)
}
