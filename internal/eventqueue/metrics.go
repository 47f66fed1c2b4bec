package eventqueue

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

const (
	dropQueueFull = "queue_full"
	dropShutdown  = "shutdown"
)

var droppedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "kcl_artifact_controller_events_dropped_total",
	Help: "Events not posted to the events receiver (notification-controller), by reason: queue_full (the receiver is slower than events come), shutdown (still queued when the drain timeout passed). Their Kubernetes Events are recorded.",
}, []string{"reason"})

func init() {
	// both series exist from the start, so that an alert on their increase sees the first drop
	droppedTotal.WithLabelValues(dropQueueFull)
	droppedTotal.WithLabelValues(dropShutdown)
	metrics.Registry.MustRegister(droppedTotal)
}
