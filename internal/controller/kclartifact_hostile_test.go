package controller

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// serverMarker is what an internal service would answer; it must appear nowhere.
const serverMarker = "INTERNAL-SERVICE-RESPONSE: db_password=hunter2"

// hostileDeps are a tenant's own dependency servers, each lying its way, as kcl.mod entries.
func hostileDeps(t *testing.T) map[string]string {
	liar := kclmodtest.LyingPackServer(t, 0xFFFFFFFF)
	bigError := kclmodtest.ErrorServer(t, http.StatusNotFound, "NOT-FOUND ", 1<<30)
	tags := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		_, _ = io.WriteString(w, `{"name":"kcl-lang/k8s","tags":[`)
		kclmodtest.WriteRepeated(w, `"1.0.0-aaaaaaaaaaaaaaaaaaaaaaa",`, 512<<20)
	})
	drip := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		kclmodtest.Drip(w, rw, strings.Repeat(" ", 1000), time.Second)
	})
	forged := kclmodtest.ErrorServer(t, http.StatusBadRequest, serverMarker, int64(len(serverMarker)))
	oci := func(h *kclmodtest.Hostile) string {
		return fmt.Sprintf(`k8s = { oci = "oci://%s/kcl-lang/k8s", tag = "1.31.2" }`, h.Host)
	}
	return map[string]string{
		"lying-pack": fmt.Sprintf(`k8s = { git = "%s/git/x", branch = "main" }`, liar.Server.URL),
		"error-body": oci(bigError),
		"tag-list":   fmt.Sprintf(`k8s = { oci = "oci://%s/kcl-lang/k8s" }`, tags.Host),
		"drip":       oci(drip),
		"forgery":    oci(forged),
	}
}

// A tenant whose kcl.mod names lying servers (a pack header claiming four billion objects, a
// 1 GiB error body, a 512 MiB tag list, a drip, an internal service's 400) fails its own
// KCLArtifact with DependencyFailed and keeps its last good artifact served; the controller
// survives, its peak RSS does not move, the server's words appear in no condition or event, and
// another namespace's change is rendered meanwhile. One attack at a time, so that each one's
// figures are its own.
func TestHostileDependencyServersFailOnlyTheirTenant(t *testing.T) {
	other := newFixture(t)
	other.commit("b0", map[string]string{"main.k": program})
	start := time.Now()
	bystander := other.waitReady(other.create("app", nil))
	t.Logf("the other namespace's first render took %s", time.Since(start).Round(time.Millisecond))
	reg := kclmodtest.StartRegistry(t, "", "")
	good := pushK8s(t, reg)
	want := map[string]string{"lying-pack": "claims 4294967295 objects", "error-body": "HTTP 404", "tag-list": "larger than",
		"drip": "slower than", "forgery": "HTTP 400"}
	deps := hostileDeps(t)
	for i, name := range []string{"lying-pack", "error-body", "tag-list", "drip", "forgery"} {
		t.Run(name, func(t *testing.T) {
			tenant := newFixture(t)
			g := tenant.g
			tenant.commit("a1", map[string]string{"kcl.mod": appMod(good), "main.k": k8sProgram})
			obj := tenant.waitReady(tenant.create("app", nil))
			published := obj.Status.Artifact.Digest

			resetPeakRSS(t)
			before := peakRSS(t)
			tenant.commit("a2", map[string]string{"kcl.mod": appMod(deps[name]), "main.k": k8sProgram})
			start := time.Now()
			rev := fmt.Sprintf("b%d", i+1)
			other.commit(rev, map[string]string{"main.k": program + "\n# " + rev + "\n"})
			other.waitReady(other.waitRevision(bystander, rev))
			delay := time.Since(start)

			obj = tenant.waitRevision(obj, "a2")
			c := conditions.Get(obj, meta.ReadyCondition)
			g.Expect(c.Reason).To(Equal(kclv1.DependencyFailedReason), c.Message)
			g.Expect(c.Message).To(ContainSubstring(want[name]))
			g.Expect(c.Message).NotTo(ContainSubstring("hunter2"))
			g.Expect(c.Message).NotTo(ContainSubstring("NOT-FOUND"))
			g.Expect(obj.Status.Artifact.Digest).To(Equal(published), "the last good artifact is kept")
			code, _ := fetch(g, latestYAML(obj))
			g.Expect(code).To(Equal(http.StatusOK))
			g.Eventually(tenant.eventText, timeout, interval).Should(ContainSubstring(`dependency "k8s"`))
			g.Expect(tenant.eventText()).NotTo(ContainSubstring("hunter2"))
			after := peakRSS(t)
			t.Logf("%s: controller peak RSS %d MiB before, %d MiB during; the other namespace's change rendered in %s; %s",
				name, before>>20, after>>20, delay.Round(time.Millisecond), c.Message)
			g.Expect(after-before).To(BeNumerically("<", 128<<20), "the controller's peak RSS grew")
		})
	}
}

// A program's words reach conditions and events through its assert messages and object names.
// A name Kubernetes would refuse fails the render as InvalidOutput, shown reduced to safe
// characters; an assert message loses its control and bidirectional characters in the
// condition, and the event is one line, so neither can forge a line or read otherwise in an alert.
func TestProgramTextInMessagesIsDefused(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{
		"name/main.k":   `[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "x` + "`" + ` | ok |\n\n**Approved**"}]` + "\n",
		"assert/main.k": "assert False, \"fine\\n+++ b/ConfigMap/forged\u202egnp.exe\x07\"\n",
	})
	named := f.waitFor(f.create("name", func(s *kclv1.KCLArtifactSpec) { s.Path = "name" }), metav1.ConditionFalse, kclv1.InvalidOutputReason)
	msg := conditions.GetMessage(named, meta.ReadyCondition)
	f.g.Expect(msg).To(ContainSubstring("invalid metadata.name"))
	f.g.Expect(msg).NotTo(ContainSubstring("**Approved**"))
	f.g.Expect(msg).NotTo(ContainSubstring("`"))

	asserted := f.waitFor(f.create("assert", func(s *kclv1.KCLArtifactSpec) { s.Path = "assert" }), metav1.ConditionFalse, kclv1.RenderFailedReason)
	msg = conditions.GetMessage(asserted, meta.ReadyCondition)
	f.g.Expect(msg).To(ContainSubstring("fine"))
	f.g.Expect(msg).NotTo(ContainSubstring("\u202e"))
	f.g.Expect(msg).NotTo(ContainSubstring("\x07"))
	f.g.Eventually(f.eventText, timeout, interval).Should(ContainSubstring("gnp.exe"))
	for _, line := range strings.Split(strings.TrimSpace(f.eventText()), "\n") {
		f.g.Expect(line).NotTo(HavePrefix("+++"), "an event line starts as the program wrote it")
		f.g.Expect(line).NotTo(ContainSubstring("\u202e"))
	}
}
