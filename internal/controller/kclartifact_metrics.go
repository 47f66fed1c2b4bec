package controller

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// sandboxGauge states the render sandbox in force, so that an unconfined controller shows on a
// dashboard and can be alerted on.
var sandboxGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "kcl_artifact_controller_render_sandbox",
	Help: "1 when KCL renders are confined (Landlock and seccomp), 0 when --kcl-sandbox=off; landlock_abi is the kernel's Landlock ABI.",
}, []string{"landlock_abi"})

func init() { metrics.Registry.MustRegister(sandboxGauge) }

// RecordSandbox sets the sandbox metric.
func RecordSandbox(confined bool, landlockABI int) {
	v := 0.0
	if confined {
		v = 1
	}
	sandboxGauge.WithLabelValues(strconv.Itoa(landlockABI)).Set(v)
}
