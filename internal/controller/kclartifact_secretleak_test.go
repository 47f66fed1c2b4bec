package controller

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	artcfg "github.com/fluxcd/pkg/artifact/config"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
)

// Issue 54, finding 1: a value derived from a Secret input must reach no reader of status,
// history, events or diffs. The attacker is a namespace viewer: the project's view role plus read
// of Flux's objects and events, never of Secrets.

// leakProgram is the ordinary case: a Secret rendered from a Secret input, and a ConfigMap the
// program derives from it (upper-cased, reversed, split).
const leakProgram = `import base64
_pw: str = option("password")
[
    {apiVersion = "v1", kind = "Secret", metadata.name = "db", data.password = base64.encode(_pw)}
    {apiVersion = "v1", kind = "ConfigMap", metadata.name = "derived", data = {
        upper = _pw.upper()
        reversed = _pw[::-1]
        split = ",".join(_pw.split("-"))
    }}
]
`

// leakReaderProgram renders every value it reads from the exporter.
const leakReaderProgram = `_keys = ["x1", "upper", "reversed", "split", "size", "oracle"]
[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "reader", data = {k = str(option(k)) for k in _keys}}]
`

// leakExports are the exports the attacker tries: the X1 case (a rendered Secret's base64), what
// the program derived, and what CEL derives (a size, a boolean oracle).
func leakExports() []kclv1.Export {
	secret, cm := `objects.filter(o, o.kind == "Secret")[0]`, `objects.filter(o, o.kind == "ConfigMap")[0]`
	return []kclv1.Export{
		{Name: "x1", Expression: secret + ".data.password"},
		{Name: "upper", Expression: cm + ".data.upper"},
		{Name: "reversed", Expression: cm + ".data.reversed"},
		{Name: "split", Expression: cm + ".data.split"},
		{Name: "size", Expression: "size(" + secret + ".data.password)"},
		{Name: "oracle", Expression: secret + `.data.password.startsWith("czNjcjN0")`},
	}
}

func reverse(s string) string {
	r := []rune(s)
	slices.Reverse(r)
	return string(r)
}

// secretForms are the encodings of a Secret value a viewer must never read: the value, its
// base64, upper-case and reverse of both, and the parts a split gives.
func secretForms(values ...string) []string {
	var out []string
	for _, v := range values {
		b := base64.StdEncoding.EncodeToString([]byte(v))
		out = append(out, v, b, strings.ToUpper(v), strings.ToUpper(b), reverse(v), reverse(b))
		for _, part := range strings.Split(v, "-") {
			if len(part) >= 6 {
				out = append(out, part)
			}
		}
	}
	return out
}

// viewer is a user bound to the project's view role (config/rbac/kclartifact_viewer_role.yaml, as
// installed) and to read of Flux's objects and of events in f's namespace: what `view` and
// `flux-view` give. It cannot read Secrets.
func viewer(f *fixture, user string) client.Client {
	f.t.Helper()
	installManifests(f, "../../config/rbac/kclartifact_viewer_role.yaml")
	name := "viewer-" + user
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"source.toolkit.fluxcd.io"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"kustomize.toolkit.fluxcd.io"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
	}}
	f.g.Expect(k8sClient.Create(f.ctx, role)).To(Succeed())
	for kind, roleName := range map[string]string{"Role": name, "ClusterRole": "kcl-artifact-controller-view"} {
		f.g.Expect(k8sClient.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + strings.ToLower(kind), Namespace: f.ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: roleName},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
	}
	c := as(f, user)
	f.g.Eventually(func() error {
		return c.List(f.ctx, &kclv1.KCLArtifactList{}, client.InNamespace(f.ns))
	}, timeout, interval).Should(Succeed())
	f.g.Expect(c.List(f.ctx, &corev1.SecretList{}, client.InNamespace(f.ns))).NotTo(Succeed())
	return c
}

// viewable is everything the viewer c reads in f's namespace, by where it was read: every
// KCLArtifact (status included), ExternalArtifact, Kustomization and event, whole; and the Flux
// events and the artifact server's diffs they link to, for the objects named.
func viewable(f *fixture, c client.Client, objs ...*kclv1.KCLArtifact) map[string]string {
	f.t.Helper()
	out := map[string]string{}
	for _, gvk := range []schema.GroupVersionKind{
		kclv1.GroupVersion.WithKind("KCLArtifactList"),
		{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "ExternalArtifactList"},
		{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "KustomizationList"},
		{Version: "v1", Kind: "EventList"},
		{Group: "events.k8s.io", Version: "v1", Kind: "EventList"},
	} {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(gvk)
		f.g.Expect(c.List(f.ctx, l, client.InNamespace(f.ns))).To(Succeed(), "the viewer lists %s", gvk.Kind)
		for _, item := range l.Items {
			b, err := json.Marshal(item.Object)
			f.g.Expect(err).NotTo(HaveOccurred())
			out[fmt.Sprintf("%s %s (%s)", strings.TrimSuffix(gvk.Kind, "List"), item.GetName(), gvk.Group)] = string(b)
		}
	}
	group := kclv1.GroupVersion.Group + "/"
	for _, o := range objs {
		for i, e := range eventsReceiver.of(o) {
			b, err := json.Marshal(e)
			f.g.Expect(err).NotTo(HaveOccurred())
			out[fmt.Sprintf("Flux event %d of %s", i, o.Name)] = string(b)
			if u := e.Metadata[group+diffURLKey]; u != "" {
				_, body := fetch(f.g, u)
				out[fmt.Sprintf("/diff of Flux event %d of %s", i, o.Name)] = body
			}
		}
	}
	return out
}

// leaks names each place of seen that holds one of forms.
func leaks(seen map[string]string, forms []string) []string {
	var out []string
	for where, text := range seen {
		for _, s := range forms {
			if strings.Contains(text, s) {
				out = append(out, fmt.Sprintf("%s holds %q", where, s))
			}
		}
	}
	slices.Sort(out)
	return out
}

// settled asks the KCLArtifact for a reconcile and waits until it has handled it: whatever it
// concluded, it concluded from what was there when asked.
func settled(f *fixture, obj *kclv1.KCLArtifact) *kclv1.KCLArtifact {
	f.t.Helper()
	f.requestReconcile(obj)
	f.g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	return obj
}

// The attacker's case: a program renders a Secret from a Secret input and exports its base64
// (X1), and values the program or CEL derives from it (upper-case, reversed, split, size, a
// boolean oracle); another KCLArtifact reads the exports; the Secret is rotated. The viewer reads
// every field it may read, events and diffs: no form of either password is in any of it, and
// the exporter says why it exports nothing.
func TestSecretDerivedValuesReachNoViewer(t *testing.T) {
	f := newFixture(t)
	const old, rotated = "s3cr3t-Pa55word-w0rd", "n3wer-Pa55phrase-t0ken"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: f.ns,
		Labels: map[string]string{meta.LabelKeyWatch: meta.LabelValueWatchEnabled}},
		StringData: map[string]string{"password": old}}
	f.g.Expect(k8sClient.Create(f.ctx, secret)).To(Succeed())
	f.commit("aaa", map[string]string{"app/main.k": leakProgram, "reader/main.k": leakReaderProgram})
	app := f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.Path = "app"
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "Secret", Name: "creds"}}
		s.Exports = leakExports()
	})
	reader := f.create("reader", func(s *kclv1.KCLArtifactSpec) {
		s.Path = "reader"
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "KCLArtifact", Name: "app"}}
	})
	see := viewer(f, "vic")
	app, reader = settled(f, app), settled(f, reader)

	// the rotation: before the fix, the reader's history, event and /diff said `x1 old → new`
	f.g.Eventually(func() error {
		if err := k8sClient.Get(f.ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
			return err
		}
		secret.StringData = map[string]string{"password": rotated}
		return k8sClient.Update(f.ctx, secret)
	}, timeout, interval).Should(Succeed())
	b64 := base64.StdEncoding.EncodeToString([]byte(rotated))
	f.g.Eventually(func() bool {
		app = settled(f, app)
		// refused, or (before the fix) exporting the rotated password's base64
		return conditions.GetReason(app, meta.ReadyCondition) == kclv1.ExportFailedReason ||
			slices.ContainsFunc(app.Status.Exports, func(e kclv1.ExportedValue) bool { return e.Value == b64 })
	}, timeout, interval).Should(BeTrue(), "the exporter handles the rotation")
	f.g.Eventually(func() bool {
		reader = settled(f, reader)
		return conditions.GetReason(reader, meta.ReadyCondition) == kclv1.InputNotReadyReason ||
			len(reader.Status.History) > 0 && slices.ContainsFunc(reader.Status.History[0].Inputs,
				func(e kclv1.InputValue) bool { return e.Value == b64 })
	}, timeout, interval).Should(BeTrue(), "the reader handles the exporter's news")

	f.g.Expect(leaks(viewable(f, see, app, reader), secretForms(old, rotated))).To(BeEmpty())
	f.g.Expect(app.Status.Exports).To(BeEmpty())
	f.g.Expect(conditions.GetMessage(app, meta.ReadyCondition)).To(Equal(
		"exports are refused: this KCLArtifact reads Secret inputs (argumentsFrom Secret/creds), and a value rendered " +
			"from them could reach every reader of its status; export from a KCLArtifact that reads no Secret"))
	f.g.Expect(conditions.IsStalled(app)).To(BeTrue())
	f.g.Expect(app.Status.Artifact).To(BeNil(), "nothing was published")
	f.g.Expect(reader.Status.History).To(BeEmpty())
	f.g.Expect(conditions.GetReason(reader, meta.ReadyCondition)).To(Equal(kclv1.InputNotReadyReason))
}

// pinProgram renders a Secret from a Secret input and a ConfigMap from spec.arguments. KCL reads
// the argument 0042 as the number 42: rendered, the PIN is the number's digits.
const pinProgram = `import base64
[
    {apiVersion = "v1", kind = "Secret", metadata.name = "pin", data.pin = base64.encode(str(option("pin")))}
    {apiVersion = "v1", kind = "ConfigMap", metadata.name = "app", data.env = option("env")}
]
`

// publicInputDigest is status.inputDigest as the controller computed it before issue 54, from
// what a viewer knows: the source's digest (flux-view reads it), the spec, the engine string (one
// per release), every argument's name (history[].inputs) and a guess of each Secret value.
func publicInputDigest(sourceDigest, engine string, obj *kclv1.KCLArtifact, args []kcllibArgument) string {
	s := obj.Spec
	doc := struct {
		Source, Engine, Path                    string
		Entries, Settings, Overrides, Selectors []string
		Args                                    []kcllibArgument
		Flags                                   [4]bool
		Exports                                 []kclv1.Export `json:",omitempty"`
	}{sourceDigest, engine, s.Path, s.Entries, s.Settings, s.Overrides, s.PathSelectors, args,
		[4]bool{s.SortKeys, s.ShowHidden, s.DisableNone, s.StrictRangeCheck}, s.Exports}
	b, _ := json.Marshal(doc)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// kcllibArgument is the JSON shape of an argument in the digest: {"Name":…,"Value":…}.
type kcllibArgument struct{ Name, Value string }

// Issue 54, finding 2: a viewer brute-forces a 4-digit Secret value from every digest it reads
// (status.inputDigest; the artifact's digest, file name and revision, which the ExternalArtifact
// and Kustomization repeat), computing each digest as the controller would from everything
// public, for all 10,000 values. Before the fix, inputDigest gave the PIN in milliseconds, and
// so did the artifact's file name (the sha256 of its manifests.yaml).
func TestDigestsRevealNoSecret(t *testing.T) {
	f := newFixture(t)
	const pin = "4821"
	f.g.Expect(k8sClient.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pins", Namespace: f.ns},
		StringData: map[string]string{"pin": pin}})).To(Succeed())
	f.commit("aaa", map[string]string{"main.k": pinProgram})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "Secret", Name: "pins"}}
		s.Arguments = map[string]string{"env": "prod"}
	}))
	see := viewer(f, "vic")
	seen := &kclv1.KCLArtifact{}
	f.g.Expect(see.Get(f.ctx, client.ObjectKeyFromObject(obj), seen)).To(Succeed())
	repo := &unstructured.Unstructured{}
	repo.SetGroupVersionKind(schema.GroupVersionKind{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"})
	f.g.Expect(see.Get(f.ctx, client.ObjectKeyFromObject(f.repo), repo)).To(Succeed())
	sourceDigest, _, _ := unstructured.NestedString(repo.Object, "status", "artifact", "digest")
	f.g.Expect(sourceDigest).NotTo(BeEmpty())
	f.g.Expect(seen.Status.History).NotTo(BeEmpty())
	names := []string{}
	for _, in := range seen.Status.History[0].Inputs {
		names = append(names, in.Name)
	}
	f.g.Expect(names).To(Equal([]string{"env", "pin"}), "the viewer learns the arguments' names from the history")

	// the rendered YAML, as the viewer would render the public program with a guess: here, the
	// artifact's, with the guess's base64 in place of the PIN's
	yaml := artifactFilesAt(f.g, obj.Status.Artifact.URL)["manifests.yaml"]
	rendered := func(guess string) string {
		n, _ := strconv.Atoi(guess)
		return base64.StdEncoding.EncodeToString([]byte(strconv.Itoa(n)))
	}
	pinB64 := rendered(pin)
	f.g.Expect(yaml).To(ContainSubstring(pinB64))
	fileName := strings.TrimSuffix(path.Base(seen.Status.Artifact.Path), ".tar.gz")
	scratch, err := artifactstore.New(&artcfg.Options{StoragePath: t.TempDir(), StorageAddress: "x:1", StorageAdvAddress: "x:1"})
	f.g.Expect(err).NotTo(HaveOccurred())

	var found []string
	start := time.Now()
	for i := range 10_000 {
		guess := fmt.Sprintf("%04d", i)
		if publicInputDigest(sourceDigest, "test", seen, []kcllibArgument{{"env", "prod"}, {"pin", guess}}) == seen.Status.InputDigest {
			found = append(found, "status.inputDigest gives "+guess)
		}
		content := strings.Replace(yaml, pinB64, rendered(guess), 1)
		sum := sha256.Sum256([]byte(content))
		if hex.EncodeToString(sum[:]) == fileName {
			found = append(found, "status.artifact.path gives "+guess)
		}
		if i%100 == 21 || guess == pin { // the archive costs a file: a sample, and the PIN itself
			c := artifactstore.NewContent()
			_, _ = c.Write([]byte(content))
			art, err := scratch.StoreFiles(seen, "main", []artifactstore.File{{Name: "manifests.yaml", Content: c}})
			f.g.Expect(err).NotTo(HaveOccurred())
			c.Close()
			if art.Digest == seen.Status.Artifact.Digest {
				found = append(found, "status.artifact.digest gives "+guess)
			}
		}
	}
	t.Logf("10,000 guesses of each digest in %v", time.Since(start).Round(time.Millisecond))
	f.g.Expect(found).To(BeEmpty())
}

// The artifact of a KCLArtifact that reads a Secret carries a keyed salt, and its Jobs a keyed
// revision (which whoever reads Jobs reads): no hash of its output is one a reader can compute.
// One that reads no Secret is archived as before, its Jobs stamped with the output's sha256.
func TestSecretReadersArtifactsAreKeyed(t *testing.T) {
	f := newFixture(t)
	f.g.Expect(k8sClient.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "version", Namespace: f.ns},
		StringData: map[string]string{"v": "7"}})).To(Succeed())
	f.commit("aaa", map[string]string{"main.k": phasedProgram})
	secret := f.waitReady(f.create("secret", func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "Secret", Name: "version"}}
	}))
	public := f.waitReady(f.create("public", func(s *kclv1.KCLArtifactSpec) { s.Arguments = map[string]string{"v": "7"} }))

	salted, plain := artifactFilesAt(f.g, secret.Status.Artifact.URL), artifactFilesAt(f.g, public.Status.Artifact.URL)
	f.g.Expect(salted).To(HaveKeyWithValue(artifactstore.SaltName, MatchRegexp(`^hmac-sha256:[0-9a-f]{64}\n$`)))
	f.g.Expect(plain).NotTo(HaveKey(artifactstore.SaltName))
	f.g.Expect(jobRevision(f.g, salted["pre/manifests.yaml"])).To(MatchRegexp(`^hmac-sha256:[0-9a-f]{64}$`))
	f.g.Expect(jobRevision(f.g, plain["pre/manifests.yaml"])).To(MatchRegexp(`^sha256:[0-9a-f]{64}$`))
	f.g.Expect(secret.Status.Artifact.Digest).NotTo(Equal(public.Status.Artifact.Digest))

	// rendered again (an argument the program does not read), the same output gives the same
	// artifact: nothing new is published
	before, inputs := secret.Status.Artifact.Digest, secret.Status.InputDigest
	f.update(secret, func(s *kclv1.KCLArtifactSpec) { s.Arguments = map[string]string{"unused": "x"} })
	secret = f.waitReady(secret)
	f.g.Expect(secret.Status.InputDigest).NotTo(Equal(inputs))
	f.g.Expect(secret.Status.Artifact.Digest).To(Equal(before))
	f.g.Expect(secret.Status.History).To(HaveLen(1))
}
