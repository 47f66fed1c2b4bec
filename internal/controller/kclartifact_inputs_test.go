package controller

import (
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/acl"
	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
)

// imageProgram writes the image an ImagePolicy selected into a ConfigMap, with the type KCL
// gave each argument.
const imageProgram = `_image = option("web.image")
_tag = option("web.tag")
[{
    apiVersion = "v1"
    kind = "ConfigMap"
    metadata = {name = "web"}
    data = {image = _image, tag = _tag, tagType = typeof(_tag)}
}]
`

// imagePolicy stands for one image-reflector-controller wrote: this envtest runs no
// image-reflector-controller (test/e2e runs the real one), so the test writes its status.
func imagePolicy(f *fixture, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"imageRepositoryRef": map[string]any{"name": name},
			"policy":             map[string]any{"semver": map[string]any{"range": ">=1.0.0"}},
		},
	}}
	u.SetGroupVersionKind(arguments.ImagePolicy)
	u.SetNamespace(f.ns)
	u.SetName(name)
	f.g.Expect(k8sClient.Create(f.ctx, u)).To(Succeed())
	return u
}

// selectImage writes the policy's status: the tag selected (none when tag is empty) and Ready.
func selectImage(f *fixture, u *unstructured.Unstructured, tag string, ready bool) {
	f.t.Helper()
	f.g.Eventually(func() error {
		if err := k8sClient.Get(f.ctx, client.ObjectKeyFromObject(u), u); err != nil {
			return err
		}
		st, reason := metav1.ConditionTrue, "Succeeded"
		if !ready {
			st, reason = metav1.ConditionFalse, "ReconciliationFailed"
		}
		status := map[string]any{
			"observedGeneration": u.GetGeneration(),
			"conditions": []any{map[string]any{"type": meta.ReadyCondition, "status": string(st), "reason": reason,
				"message": "scan " + reason, "lastTransitionTime": metav1.Now().UTC().Format("2006-01-02T15:04:05Z")}},
		}
		if tag != "" {
			status["latestRef"] = map[string]any{"name": "registry.example/web", "tag": tag}
		}
		u.Object["status"] = status
		return k8sClient.Status().Update(f.ctx, u)
	}, timeout, interval).Should(Succeed())
}

func waitData(f *fixture, obj *kclv1.KCLArtifact, want ...string) *kclv1.KCLArtifact {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.Artifact).NotTo(BeNil())
		code, y := fetch(g, latestYAML(obj))
		g.Expect(code).To(Equal(200))
		for _, w := range want {
			g.Expect(y).To(ContainSubstring(w))
		}
	}, timeout, interval).Should(Succeed())
	return obj
}

// waitInput waits until the current artifact's history entry records input name at value.
func waitInput(f *fixture, obj *kclv1.KCLArtifact, name, value string) *kclv1.KCLArtifact {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.History).NotTo(BeEmpty())
		g.Expect(obj.Status.Artifact).NotTo(BeNil())
		g.Expect(obj.Status.History[0].Digest).To(Equal(obj.Status.Artifact.Digest))
		g.Expect(obj.Status.History[0].Inputs).To(ContainElement(HaveField("Name", name)))
		for _, in := range obj.Status.History[0].Inputs {
			if in.Name == name {
				g.Expect(in.Value).To(Equal(value))
			}
		}
	}, timeout, interval).Should(Succeed())
	return obj
}

func TestArgumentsFromImagePolicy(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": imageProgram})
	policy := imagePolicy(f, "web")
	obj := f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ImagePolicy", Name: "web"}}
	})
	// nothing selected yet: a clear condition, nothing published
	obj = f.waitFor(obj, metav1.ConditionFalse, kclv1.InputNotReadyReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("ImagePolicy web: has not selected an image yet"))

	// a tag that looks like a number stays a string
	selectImage(f, policy, "1.10", true)
	obj = waitData(f, obj, "image: registry.example/web:1.10", `tag: "1.10"`, "tagType: str")
	obj = waitInput(f, obj, "web.tag", "1.10")
	f.g.Expect(obj.Status.History[0].Inputs).To(ContainElement(kclv1.InputValue{Name: "web.tag", Value: "1.10", From: "ImagePolicy/web"}))
	good := obj.Status.Artifact.DeepCopy()

	// a new tag renders at once, and the event says why
	before := renders.Load()
	selectImage(f, policy, "1.11", true)
	changed := time.Now()
	obj = waitData(f, obj, `tag: "1.11"`)
	t.Logf("ImagePolicy status changed -> new artifact served: %s (polled every %s)", time.Since(changed).Round(time.Millisecond), interval)
	f.g.Expect(renders.Load()).To(BeNumerically(">", before))
	f.g.Eventually(func() []string { return messages(eventsReceiver.of(obj)) }, timeout, interval).
		Should(ContainElement(ContainSubstring("with web.image registry.example/web:1.10 → registry.example/web:1.11, web.tag 1.10 → 1.11")))
	// the latest link moves before status is written: the artifact is the one status records
	// once its inputs say 1.11
	obj = waitInput(f, obj, "web.tag", "1.11")
	good = obj.Status.Artifact.DeepCopy()

	// not Ready: a clear condition, the last artifact stays
	selectImage(f, policy, "1.12", false)
	obj = f.waitFor(obj, metav1.ConditionFalse, kclv1.InputNotReadyReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("ImagePolicy web: is not ready (ReconciliationFailed"))
	sameArtifact(f.g, obj.Status.Artifact, good)
	code, _ := fetch(f.g, good.URL)
	f.g.Expect(code).To(Equal(200))
}

func TestUnrelatedImagePolicyRendersNothing(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": imageProgram})
	web, other := imagePolicy(f, "web"), imagePolicy(f, "other")
	selectImage(f, web, "1.0.0", true)
	obj := waitData(f, f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ImagePolicy", Name: "web"}}
	}), "tag: 1.0.0")
	f.waitReady(obj)
	before, gen := renders.Load(), obj.Status.ObservedGeneration
	for _, tag := range []string{"2.0.0", "2.0.1", "2.0.2"} {
		selectImage(f, other, tag, true)
	}
	// a change the KCLArtifact does read, after them: once it is rendered, the others were seen
	selectImage(f, web, "1.0.1", true)
	waitData(f, obj, "tag: 1.0.1")
	f.g.Expect(renders.Load()-before).To(BeEquivalentTo(1), "only web's change renders")
	f.g.Expect(obj.Status.ObservedGeneration).To(Equal(gen))
}

func TestMissingImagePolicyKeepsLastArtifact(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	good := obj.Status.Artifact.DeepCopy()
	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ImagePolicy", Name: "nope"}}
	})
	obj = f.waitFor(obj, metav1.ConditionFalse, kclv1.InputNotReadyReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("ImagePolicy nope: not found in namespace " + f.ns))
	sameArtifact(f.g, obj.Status.Artifact, good)
}

// serviceProgram writes what it reads of a Service.
const serviceProgram = `[{
    apiVersion = "v1"
    kind = "ConfigMap"
    metadata = {name = "client"}
    data = {ip = option("db.ip"), port = str(option("db.port")), portType = typeof(option("db.port"))}
}]
`

func service(f *fixture, name string, port int32) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: port}}}}
	f.g.Expect(k8sClient.Create(f.ctx, s)).To(Succeed())
	return s
}

func dbValues() []kclv1.ArgumentValue {
	return []kclv1.ArgumentValue{{Name: "db.ip", FieldPath: ".spec.clusterIP"}, {Name: "db.port", Expression: "object.spec.ports[0].port"}}
}

func TestArgumentsFromAnAllowedKind(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": serviceProgram})
	svc := service(f, "db", 5432)
	obj := f.create("app", func(s *kclv1.KCLArtifactSpec) {
		// db.version is an input the program does not output
		values := append(dbValues(), kclv1.ArgumentValue{Name: "db.version", FieldPath: ".metadata.resourceVersion"})
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{APIVersion: "v1", Kind: "Service", Name: "db", Values: values}}
	})
	f.get(svc)
	obj = waitData(f, obj, "ip: "+svc.Spec.ClusterIP, `port: "5432"`, "portType: int")
	first := obj.Status.Artifact.DeepCopy()

	// an input changes, the output does not: rendered, nothing published
	before := renders.Load()
	f.g.Eventually(func() error {
		f.get(svc)
		svc.Labels = map[string]string{"touched": "yes"}
		return k8sClient.Update(f.ctx, svc)
	}, timeout, interval).Should(Succeed())
	f.g.Eventually(renders.Load, timeout, interval).Should(BeNumerically(">", before))
	obj = f.waitReady(obj)
	sameArtifact(f.g, obj.Status.Artifact, first)
	f.g.Expect(obj.Status.History).To(HaveLen(1))

	// the Service changes: rendered again without being asked
	f.g.Eventually(func() error {
		f.get(svc)
		svc.Spec.Ports[0].Port = 6432
		return k8sClient.Update(f.ctx, svc)
	}, timeout, interval).Should(Succeed())
	waitData(f, obj, `port: "6432"`)
}

func TestBadInputsAreClearConditionsAndKeepTheLastArtifact(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	service(f, "db", 5432)
	obj := f.waitReady(f.create("app", nil))
	good := obj.Status.Artifact.DeepCopy()
	for _, tc := range []struct {
		name, reason, message string
		ref                   kclv1.ArgumentsReference
	}{
		{"a kind the operator did not allow", acl.AccessDeniedReason,
			"argumentsFrom Deployment.apps app: kind Deployment.apps is not one the operator allows (--arguments-from-kinds: v1/Service); it was not read",
			kclv1.ArgumentsReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "app", Values: []kclv1.ArgumentValue{{Name: "r", FieldPath: ".spec.replicas"}}}},
		{"a Secret through the generic form", kclv1.ArgumentsFailedReason,
			"argumentsFrom Secret creds: values read other kinds; a Secret is read with keys",
			kclv1.ArgumentsReference{APIVersion: "v1", Kind: "Secret", Name: "creds", Values: []kclv1.ArgumentValue{{Name: "p", Expression: "object.data.password"}}}},
		{"an expression that does not compile", kclv1.ArgumentsFailedReason, "argumentsFrom Service db: value x: ",
			kclv1.ArgumentsReference{APIVersion: "v1", Kind: "Service", Name: "db", Values: []kclv1.ArgumentValue{{Name: "x", Expression: "object.spec.("}}}},
		{"an expression that returns a map", kclv1.ArgumentsFailedReason, "argumentsFrom Service db: value x: ",
			kclv1.ArgumentsReference{APIVersion: "v1", Kind: "Service", Name: "db", Values: []kclv1.ArgumentValue{{Name: "x", Expression: "object.spec"}}}},
		// the cost limit or the time budget, whichever comes first on this machine
		{"a slow expression", kclv1.ArgumentsFailedReason, "value x: the expression was stopped: it exceeded its ",
			kclv1.ArgumentsReference{APIVersion: "v1", Kind: "Service", Name: "db", Values: []kclv1.ArgumentValue{{Name: "x", Expression: slowExpression}}}},
		{"a missing object", kclv1.ArgumentsFailedReason, "argumentsFrom Service nope: not found in namespace " + f.ns,
			kclv1.ArgumentsReference{APIVersion: "v1", Kind: "Service", Name: "nope", Values: []kclv1.ArgumentValue{{Name: "x", FieldPath: ".spec.clusterIP"}}}},
		{"a missing export", kclv1.InputNotReadyReason, "argumentsFrom KCLArtifact nope: not found in namespace " + f.ns,
			kclv1.ArgumentsReference{Kind: "KCLArtifact", Name: "nope"}},
	} {
		f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.ArgumentsFrom = []kclv1.ArgumentsReference{tc.ref} })
		f.g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			c := conditions.Get(obj, meta.ReadyCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse), tc.name)
			g.Expect(c.Reason).To(Equal(tc.reason), tc.name)
			g.Expect(c.Message).To(ContainSubstring(tc.message), tc.name)
		}, timeout, interval).Should(Succeed())
		sameArtifact(f.g, obj.Status.Artifact, good)
	}
}

// slowExpression loops a million times per port of the Service: CEL's estimate cannot know the
// ports, the cost limit or the time budget stops it.
var slowExpression = func() string {
	ten := "[0,1,2,3,4,5,6,7,8,9]"
	e := "true"
	for _, v := range []string{"a", "b", "c", "d", "e", "f"} {
		e = ten + ".all(" + v + ", " + e + ")"
	}
	return "object.spec.ports.all(p, " + e + ")"
}()

// exporter renders a Service named after its argument and exports its name.
const exporterProgram = `_name = option("name") or "db"
[{apiVersion = "v1", kind = "Service", metadata = {name = _name}, spec.ports = [{port = 5432}]}]
`

const readerProgram = `[{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "reader"}, data = {service = option("service")}}]
`

func TestExportsFeedAnotherKCLArtifact(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"exporter/main.k": exporterProgram, "reader/main.k": readerProgram})
	exp := f.create("exporter", func(s *kclv1.KCLArtifactSpec) {
		s.Path = "exporter"
		s.Exports = []kclv1.Export{{Name: "service", Expression: `objects.filter(o, o.kind == "Service")[0].metadata.name`}}
	})
	rd := f.create("reader", func(s *kclv1.KCLArtifactSpec) {
		s.Path = "reader"
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "KCLArtifact", Name: "exporter", Keys: []string{"service"}}}
	})
	exp = f.waitReady(exp)
	f.g.Expect(exp.Status.Exports).To(Equal([]kclv1.ExportedValue{{Name: "service", Value: "db", Literal: `"db"`}}))
	waitData(f, rd, "service: db")

	// a new export renders the reader
	f.update(exp, func(s *kclv1.KCLArtifactSpec) { s.Arguments = map[string]string{"name": "pg"} })
	waitData(f, rd, "service: pg")

	// an export that fails fails the exporter's render; what it exported stays, and so does the reader
	f.update(exp, func(s *kclv1.KCLArtifactSpec) {
		s.Exports = []kclv1.Export{{Name: "service", Expression: `objects.filter(o, o.kind == "Deployment")[0].metadata.name`}}
	})
	exp = f.waitFor(exp, metav1.ConditionFalse, kclv1.ExportFailedReason)
	f.g.Expect(exp.Status.Exports).To(Equal([]kclv1.ExportedValue{{Name: "service", Value: "pg", Literal: `"pg"`}}))
	f.waitReady(rd)
	waitData(f, rd, "service: pg")
}

func TestExportCycleIsRefusedWithTheChain(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	reads := func(name string) func(*kclv1.KCLArtifactSpec) {
		return func(s *kclv1.KCLArtifactSpec) {
			s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "KCLArtifact", Name: name, Optional: true}}
			s.Exports = []kclv1.Export{{Name: "n", Expression: "size(objects)"}}
		}
	}
	a, b := f.create("a", reads("b")), f.create("b", reads("c"))
	f.create("c", reads("a"))
	a = f.waitFor(a, metav1.ConditionFalse, kclv1.ExportCycleReason)
	f.g.Expect(conditions.GetMessage(a, meta.ReadyCondition)).To(ContainSubstring("the exports form a cycle: a → b → c → a"))
	b = f.waitFor(b, metav1.ConditionFalse, kclv1.ExportCycleReason)
	f.g.Expect(conditions.GetMessage(b, meta.ReadyCondition)).To(ContainSubstring("b → c → a → b"))
}

// The attacker names an object of another namespace: the field does not exist, the API server
// drops it, and the reference reads the tenant's own namespace only.
func TestArgumentsFromNeverReadAnotherNamespace(t *testing.T) {
	victim, f := newFixture(t), newFixture(t)
	service(victim, "db", 5432)
	f.commit("aaa", map[string]string{"main.k": serviceProgram})
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kclv1.GroupVersion.String(), "kind": kclv1.KCLArtifactKind,
		"metadata": map[string]any{"name": "app", "namespace": f.ns},
		"spec": map[string]any{
			"sourceRef": map[string]any{"kind": "GitRepository", "name": f.repo.Name}, "interval": "1h",
			"argumentsFrom": []any{map[string]any{"apiVersion": "v1", "kind": "Service", "name": "db", "namespace": victim.ns,
				"values": []any{map[string]any{"name": "db.ip", "fieldPath": ".spec.clusterIP"}}}},
		},
	}}
	f.g.Expect(k8sClient.Create(f.ctx, u)).To(Succeed())
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	obj = f.waitFor(obj, metav1.ConditionFalse, kclv1.ArgumentsFailedReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("argumentsFrom Service db: not found in namespace " + f.ns))
}

func messages(evs []eventv1.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Message)
	}
	return out
}
