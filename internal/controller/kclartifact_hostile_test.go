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

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// serverMarker is what an internal service would answer; it must appear nowhere.
const serverMarker = "INTERNAL-SERVICE-RESPONSE: db_password=hunter2"

// hostileDeps are a tenant's own dependency servers, each lying its way, as kcl.mod entries.
func hostileDeps(t *testing.T) map[string]string {
	liar := kclmodtest.FakeGitServer(t, func(w io.Writer) {
		_, _ = w.Write(kclmodtest.PackHeader(0xFFFFFFFF))
		kclmodtest.WriteRepeated(w, "\x00", 1<<20)
	})
	bigError := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		rw.WriteHeader(http.StatusNotFound)
		kclmodtest.WriteRepeated(w, "NOT-FOUND ", 1<<30)
	})
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
	forged := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		rw.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, serverMarker)
	})
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
// KCLArtifacts with DependencyFailed and keeps their last good artifacts served; the controller
// survives, its memory does not move, the servers' words appear in no condition or event, and
// another namespace's change is rendered meanwhile.
func TestHostileDependencyServersFailOnlyTheirTenant(t *testing.T) {
	tenant, other := newFixture(t), newFixture(t)
	g := tenant.g
	other.commit("b1", map[string]string{"main.k": program})
	start := time.Now()
	bystander := other.waitReady(other.create("app", nil))
	baseline := time.Since(start)

	reg := kclmodtest.StartRegistry(t, "", "")
	good := pushK8s(t, reg)
	deps := hostileDeps(t)
	files := map[string]string{}
	for name := range deps {
		files[name+"/kcl.mod"], files[name+"/main.k"] = appMod(good), k8sProgram
	}
	tenant.commit("a1", files)
	apps := map[string]*kclv1.KCLArtifact{}
	for name := range deps {
		apps[name] = tenant.create(name, func(s *kclv1.KCLArtifactSpec) { s.Path = name })
	}
	published := map[string]string{}
	for name, obj := range apps {
		published[name] = tenant.waitReady(obj).Status.Artifact.Digest
	}

	resetPeakRSS(t)
	before := peakRSS(t)
	for name, dep := range deps {
		files[name+"/kcl.mod"] = appMod(dep)
	}
	tenant.commit("a2", files)
	start = time.Now()
	other.commit("b2", map[string]string{"main.k": program + "\n# b2\n"})
	other.waitRevision(bystander, "b2")
	other.waitReady(bystander)
	during := time.Since(start)

	for name, obj := range apps {
		obj = tenant.waitRevision(obj, "a2")
		c := conditions.Get(obj, meta.ReadyCondition)
		g.Expect(c.Reason).To(Equal(kclv1.DependencyFailedReason), "%s: %s", name, c.Message)
		g.Expect(c.Message).NotTo(ContainSubstring("hunter2"), name)
		g.Expect(c.Message).NotTo(ContainSubstring("NOT-FOUND"), name)
		g.Expect(obj.Status.Artifact.Digest).To(Equal(published[name]), "%s: the last good artifact is kept", name)
		code, _ := fetch(g, latestYAML(obj))
		g.Expect(code).To(Equal(http.StatusOK), name)
		t.Logf("%s: %s", name, c.Message)
	}
	g.Expect(conditions.GetMessage(apps["lying-pack"], meta.ReadyCondition)).To(ContainSubstring("memory limit"))
	g.Expect(conditions.GetMessage(apps["forgery"], meta.ReadyCondition)).To(ContainSubstring("HTTP 400"))
	g.Expect(conditions.GetMessage(apps["tag-list"], meta.ReadyCondition)).To(ContainSubstring("larger than"))
	g.Expect(conditions.GetMessage(apps["drip"], meta.ReadyCondition)).To(ContainSubstring("slower than"))
	g.Eventually(tenant.eventText, timeout, interval).Should(ContainSubstring(`dependency "k8s"`))
	g.Expect(tenant.eventText()).NotTo(ContainSubstring("hunter2"))

	after := peakRSS(t)
	t.Logf("controller peak RSS %d MiB before the attacks, %d MiB after; the other namespace's change took %s (%s before the attacks)",
		before>>20, after>>20, during.Round(time.Millisecond), baseline.Round(time.Millisecond))
	g.Expect(after-before).To(BeNumerically("<", 128<<20), "the controller's peak RSS grew")
	g.Expect(conditions.IsReady(bystander)).To(BeTrue())
}
