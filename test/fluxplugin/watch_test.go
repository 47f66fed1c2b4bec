package fluxplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// testGetWatch: get --watch prints podinfo's row again when the row changes (suspended, then
// resumed) and not for a change the row does not show (a label); Ctrl+C ends it with exit 0.
func testGetWatch(t *testing.T, c client.Client, kc string) {
	p := fluxenv.StartFlux(t, fluxBinary(t), pluginDir, kc, "kcl", "get", "podinfo", "-n", "apps", "--watch")
	next := func(what string) string { return p.Next(t, what, time.Minute) }
	if h, row := next("header"), next("row"); !strings.HasPrefix(h, "NAME") || !strings.HasPrefix(row, "podinfo") {
		t.Fatalf("get --watch listed %q, %q", h, row)
	}
	patch(t, c, `{"metadata":{"labels":{"seen":"yes"}}}`)
	patch(t, c, `{"spec":{"suspend":true}}`)
	if row := strings.Fields(next("row after suspend")); row[0] != "podinfo" || row[2] != "True" {
		t.Errorf("after a label and then suspend, the first row printed is %q; want podinfo suspended (a label changes no row)", row)
	}
	patch(t, c, `{"spec":{"suspend":false}}`)
	if row := strings.Fields(next("row after resume")); row[2] != "False" {
		t.Errorf("after resume: %q", row)
	}
	if err := p.Interrupt(t); err != nil {
		t.Errorf("get --watch after Ctrl+C: %v", err)
	}
}

func patch(t *testing.T, c client.Client, p string) {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	obj.Namespace, obj.Name = "apps", "podinfo"
	if err := c.Patch(context.Background(), obj, client.RawPatch("application/merge-patch+json", []byte(p))); err != nil {
		t.Fatal(err)
	}
}
