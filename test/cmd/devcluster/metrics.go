package main

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcl-flux/kcl-artifact-controller/test/cmd/devcluster/devstate"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// startMetrics starts what a KCLArtifact's spec.verify reads in the dev cluster: a real
// Prometheus scraping an exporter that plays the demo application. No kubelet runs here, so no
// Pod serves requests: the exporter stands in for the Pods of Deployment devstate.PlayedDeployment
// and follows the image it names (play). Without bin/prometheus the cluster runs without them,
// and the state says why.
func startMetrics(ctx context.Context, env *fluxenv.Env) (*devstate.Metrics, string) {
	bin, err := fluxenv.PrometheusBinary()
	if err != nil {
		return nil, err.Error()
	}
	exp, err := fluxenv.StartExporter()
	if err != nil {
		return nil, "starting the exporter: " + err.Error()
	}
	prom, err := env.StartPrometheus(fluxenv.PrometheusOptions{Binary: bin,
		Jobs: []fluxenv.ScrapeJob{{Name: "demo-app", Targets: []string{exp.Addr()}}}})
	if err != nil {
		_ = exp.Close()
		return nil, "starting prometheus: " + err.Error()
	}
	go play(ctx, env, exp)
	log.Printf("prometheus %s scrapes the exporter %s, which plays Deployment %s", prom.URL(), exp.MetricsURL(), devstate.PlayedDeployment)
	return &devstate.Metrics{PrometheusURL: prom.URL(), ExporterURL: exp.MetricsURL()}, ""
}

// play makes the exporter answer as the image Deployment devstate.PlayedDeployment names would:
// the image's tag is the series' version, and the image's label devstate.ErrorRatioLabel the
// share of requests answered 500 (an image without it answers none). It polls: the dev cluster
// has no informer of its own to hang this on, and a second is what a scrape takes anyway.
func play(ctx context.Context, env *fluxenv.Env, exp *fluxenv.Exporter) {
	defer exp.Close()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		log.Printf("the exporter plays nothing: %v", err)
		return
	}
	ns, name, _ := strings.Cut(devstate.PlayedDeployment, "/")
	ratios := map[string]float64{} // by image
	played := ""
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var d appsv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil || len(d.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		image := d.Spec.Template.Spec.Containers[0].Image
		if image == played {
			continue
		}
		ratio, ok := ratios[image]
		if !ok {
			if ratio, err = errorRatioOf(ctx, image); err != nil {
				log.Printf("the exporter keeps playing %s: %v", played, err)
				continue
			}
			ratios[image] = ratio
		}
		_, tag, _ := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":")
		exp.SetVersion(tag)
		exp.SetErrorRatio(ratio)
		played = image
		log.Printf("the exporter plays %s: version %q, error ratio %g", image, tag, ratio)
	}
}

// errorRatioOf reads devstate.ErrorRatioLabel from the image's config in the registry; an image
// of another registry (the demo's default podinfo) answers no errors.
func errorRatioOf(ctx context.Context, image string) (float64, error) {
	if !strings.HasPrefix(image, "127.0.0.1:") {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := crane.Config(image, crane.Insecure, crane.WithContext(ctx))
	if err != nil {
		return 0, fmt.Errorf("reading the config of %s: %w", image, err)
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return 0, fmt.Errorf("the config of %s: %w", image, err)
	}
	v, ok := cfg.Config.Labels[devstate.ErrorRatioLabel]
	if !ok {
		return 0, nil
	}
	return strconv.ParseFloat(v, 64)
}
