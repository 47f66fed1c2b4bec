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
	Help: "Events not posted to the events receiver (notification-controller), by reason and by the namespace of the event's object: queue_full (the receiver is slower than events come; the namespace holding the most waiting events drops its own), shutdown (still queued when the drain timeout passed). Their Kubernetes Events are recorded.",
}, []string{"reason", "namespace"})

func init() {
	// Both reasons exist from the start, so that an alert on their increase sees the first drop
	// and the metric is exported before any event; a namespace's series are made with its first
	// event (backlog.add). The namespace "" is a cluster-scoped object's.
	droppedTotal.WithLabelValues(dropQueueFull, "")
	droppedTotal.WithLabelValues(dropShutdown, "")
	metrics.Registry.MustRegister(droppedTotal)
}
