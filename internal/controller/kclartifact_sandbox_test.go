package controller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The attacks of the render sandbox issue, through the real controller with the real engine,
// confined as in production. The unconfined worker runs the same programs successfully
// (internal/kclworker TestAttacksSucceedUnconfined).

const sandboxMarker = "sandbox-marker-7d41"

// plantMarkers puts the marker where a hostile program would look: the dependency cache, the
// artifact storage, the controller's temporary directory and its environment.
func plantMarkers(t *testing.T) []string {
	t.Helper()
	t.Setenv("KCL_SANDBOX_MARKER", sandboxMarker)
	var files []string
	for _, dir := range []string{depsCacheDir, testStorage.BasePath, os.TempDir()} {
		p := filepath.Join(dir, "planted-marker.txt")
		if err := os.WriteFile(p, []byte(sandboxMarker), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
		files = append(files, p)
	}
	return files
}

// configMap wraps a KCL expression into a published ConfigMap, so that whatever it reads would
// end up in the artifact.
func configMap(imports, expr string) string {
	return imports + "\n[{apiVersion = \"v1\", kind = \"ConfigMap\", metadata.name = \"leak\", data.v = str(" + expr + ")}]\n"
}

// eventText joins the messages of every event in the namespace.
func (f *fixture) eventText() string {
	var evs corev1.EventList
	f.g.Expect(k8sClient.List(f.ctx, &evs, client.InNamespace(f.ns))).To(Succeed())
	var b strings.Builder
	for _, e := range evs.Items {
		b.WriteString(e.Message + "\n")
	}
	return b.String()
}

// settled waits until the reconciler has handled the current generation and returns the object.
func (f *fixture) settled(obj *kclv1.KCLArtifact) *kclv1.KCLArtifact {
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.LastAttemptedRevision).NotTo(BeEmpty())
		c := conditions.Get(obj, meta.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).NotTo(Equal(meta.ProgressingReason))
		g.Expect(c.ObservedGeneration).To(Equal(obj.Generation))
	}, timeout, interval).Should(Succeed())
	return obj
}

func TestSandboxedProgramsReachNothingOutsideTheirSource(t *testing.T) {
	files := plantMarkers(t)
	attacks := map[string]string{
		"read-env":      configMap("import file", `file.read_env("KCL_SANDBOX_MARKER")`),
		"proc-environ":  configMap("import file", `[file.read(p) for p in file.glob("/proc/*/environ")]`),
		"glob-storage":  configMap("import file", `file.glob("`+testStorage.BasePath+`/**")`),
		"glob-staging":  configMap("import file", `file.glob("`+testStaging.Root()+`/**")`),
		"glob-deps":     configMap("import file", `file.glob("`+depsCacheDir+`/**")`),
		"write-outside": configMap("import file", `file.write("`+filepath.Join(os.TempDir(), "sandbox-written")+`", "x")`),
	}
	for i, p := range files {
		attacks["read-"+string(rune('a'+i))] = configMap("import file", `file.read("`+p+`")`)
	}
	f := newFixture(t)
	src := map[string]string{}
	for name, code := range attacks {
		src[name+"/main.k"] = code
	}
	f.commit("attack", src)
	for name := range attacks {
		obj := f.settled(f.create(name, func(s *kclv1.KCLArtifactSpec) { s.Path = name }))
		msg := conditions.GetMessage(obj, meta.ReadyCondition)
		f.g.Expect(msg).NotTo(ContainSubstring(sandboxMarker), name)
		if obj.Status.Artifact != nil {
			_, body := fetch(f.g, latestYAML(obj))
			f.g.Expect(body).NotTo(ContainSubstring(sandboxMarker), name)
			f.g.Expect(body).NotTo(ContainSubstring("planted-marker"), name)
			f.g.Expect(body).NotTo(ContainSubstring(f.ns), "%s listed a staging directory", name)
		}
		if strings.HasPrefix(name, "read-") && name != "read-env" || name == "write-outside" {
			f.g.Expect(obj.Status.Artifact).To(BeNil(), name)
			f.g.Expect(msg).To(ContainSubstring("Permission denied"), name)
		}
	}
	f.g.Expect(f.eventText()).NotTo(ContainSubstring(sandboxMarker))
	_, err := os.Stat(filepath.Join(os.TempDir(), "sandbox-written"))
	f.g.Expect(os.IsNotExist(err)).To(BeTrue(), "a program wrote outside its source")
}

func TestPathsOutsideTheSourceAreRefused(t *testing.T) {
	f := newFixture(t)
	f.commit("paths", map[string]string{
		"app/main.k":        "a = 1\n",
		"profile/kcl.mod":   "[package]\nname = \"p\"\n\n[profile]\nentries = [\"/etc/hostname\"]\n",
		"settings/kcl.yaml": "kcl_cli_configs:\n  files:\n    - /etc/hostname\n",
	})
	cases := []struct {
		name, field string
		mutate      func(*kclv1.KCLArtifactSpec)
	}{
		{"abs-entry", "spec.entries", func(s *kclv1.KCLArtifactSpec) { s.Path = "app"; s.Entries = []string{"/etc/hostname"} }},
		{"up-entry", "spec.entries", func(s *kclv1.KCLArtifactSpec) { s.Path = "app"; s.Entries = []string{"../../../x.k"} }},
		{"up-settings", "spec.settings", func(s *kclv1.KCLArtifactSpec) { s.Path = "app"; s.Settings = []string{"../../../s.yaml"} }},
		{"profile", "kcl.mod [profile] entries", func(s *kclv1.KCLArtifactSpec) { s.Path = "profile" }},
		{"settings-files", "files of the settings", func(s *kclv1.KCLArtifactSpec) { s.Path = "settings"; s.Settings = []string{"kcl.yaml"} }},
	}
	for _, c := range cases {
		obj := f.waitFor(f.create(c.name, c.mutate), metav1.ConditionFalse, kclv1.InvalidPathReason)
		msg := conditions.GetMessage(obj, meta.ReadyCondition)
		f.g.Expect(msg).To(ContainSubstring(c.field), c.name)
		f.g.Expect(msg).To(ContainSubstring("outside the source"), c.name)
	}
}

func TestProgramReadsItsOwnFilesByRelativePath(t *testing.T) {
	f := newFixture(t)
	f.commit("rel", map[string]string{
		"app/main.k":      configMap("import file\nimport yaml", `yaml.decode(file.read("values.yaml")).replicas`),
		"app/values.yaml": "replicas: 3\n",
	})
	obj := f.waitReady(f.create("rel", func(s *kclv1.KCLArtifactSpec) { s.Path = "app" }))
	_, body := fetch(f.g, latestYAML(obj))
	f.g.Expect(body).To(ContainSubstring(`v: "3"`))
}

// The forged frame of the issue: a program writes an answer into the worker channel, hoping the
// next render on that worker gets its objects.
func TestForgedAnswerNeverReachesTheNextRender(t *testing.T) {
	f := newFixture(t)
	forged := "import file\n_ = file.write(\"/proc/self/fd/3\", \"\\x00\\x00\\x00\\x01\\x00\")\n" +
		"[{apiVersion = \"rbac.authorization.k8s.io/v1\", kind = \"ClusterRoleBinding\", metadata.name = \"evil\"}]\n"
	f.commit("forge", map[string]string{"forge/main.k": forged, "good/main.k": program})
	evil := f.settled(f.create("forge", func(s *kclv1.KCLArtifactSpec) { s.Path = "forge" }))
	f.g.Expect(evil.Status.Artifact).To(BeNil())
	for _, name := range []string{"good-1", "good-2", "good-3"} {
		obj := f.waitReady(f.create(name, func(s *kclv1.KCLArtifactSpec) { s.Path = "good" }))
		f.g.Expect(obj.Status.Inventory).To(HaveLen(1))
		f.g.Expect(obj.Status.Inventory[0].Name).To(Equal("app-dev"))
	}
}

// Renders read their namespace's shared source trees in place: another namespace's tree is out
// of reach, and their own cannot be changed under the renders that follow.
func TestSharedSourceTreesAreReadOnlyAndPerNamespace(t *testing.T) {
	const secret = "tenant-a-secret-8d3f"
	victim := newFixture(t)
	victim.commit("victim", map[string]string{"app/main.k": configMap("", `"`+secret+`"`)})
	victim.waitReady(victim.create("app", func(s *kclv1.KCLArtifactSpec) { s.Path = "app" }))
	trees, err := filepath.Glob(filepath.Join(testStaging.Root(), victim.ns, "sources", "*"))
	if err != nil || len(trees) != 1 {
		t.Fatalf("the victim's shared tree: %v %v", trees, err)
	}

	f := newFixture(t)
	attacks := map[string]string{
		"read-other": configMap("import file", `file.read("`+filepath.Join(trees[0], "app", "main.k")+`")`),
		"glob-other": configMap("import file", `file.glob("`+filepath.Join(testStaging.Root(), victim.ns)+`/**")`),
		"write-own":  configMap("import file", `file.write("main.k", "poisoned")`),
		"delete-own": configMap("import file", `file.delete("../good/main.k")`),
	}
	src := map[string]string{"good/main.k": program}
	for name, code := range attacks {
		src[name+"/main.k"] = code
	}
	f.commit("attacker", src)
	for name := range attacks {
		obj := f.settled(f.create(name, func(s *kclv1.KCLArtifactSpec) { s.Path = name }))
		msg := conditions.GetMessage(obj, meta.ReadyCondition)
		f.g.Expect(msg).NotTo(ContainSubstring(secret), name)
		f.g.Expect(obj.Status.Artifact).To(BeNil(), "%s succeeded: %s", name, msg)
		f.g.Expect(msg).To(Or(ContainSubstring("Permission denied"), ContainSubstring("No such file")), name)
	}
	good := f.waitReady(f.create("good", func(s *kclv1.KCLArtifactSpec) { s.Path = "good" }))
	f.g.Expect(good.Status.Inventory).To(HaveLen(1))
	own, _ := filepath.Glob(filepath.Join(testStaging.Root(), f.ns, "sources", "*", "write-own", "main.k"))
	f.g.Expect(own).To(HaveLen(1))
	b, err := os.ReadFile(own[0])
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(string(b)).To(Equal(attacks["write-own"]))
}
