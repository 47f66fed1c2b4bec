package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// k8sSchemas is a small stand-in for the k8s package on ghcr.io/kcl-lang (that registry cannot
// be reached here): the same layout and import path, with one schema.
var k8sSchemas = map[string]string{
	"api/core/v1/config_map.k": `schema ConfigMap:
    apiVersion: "v1" = "v1"
    kind: "ConfigMap" = "ConfigMap"
    metadata: {str:any}
    data?: {str:str}

    check:
        len(metadata.name) > 0, "a ConfigMap needs a name"
`,
}

const k8sProgram = `import k8s.api.core.v1 as core

[core.ConfigMap {
    metadata.name = "from-schema"
    data = {source = "oci"}
}]
`

func pushK8s(t *testing.T, reg *kclmodtest.Registry) string {
	dir := kclmodtest.WritePackage(t, t.TempDir(), "k8s", "1.31.2", nil, k8sSchemas)
	if _, err := reg.PushPackage(context.Background(), reg.Host+"/kcl-lang/k8s:1.31.2", dir, kclmodtest.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	return `k8s = { oci = "oci://` + reg.Host + `/kcl-lang/k8s", tag = "1.31.2" }`
}

func appMod(dep string) string {
	return "[package]\nname = \"app\"\nedition = \"v0.11.0\"\nversion = \"0.1.0\"\n\n[dependencies]\n" + dep + "\n"
}

func TestOCIDependencyIsResolved(t *testing.T) {
	f := newFixture(t)
	reg := kclmodtest.StartRegistry(t, "", "")
	f.commit("aaa", map[string]string{"kcl.mod": appMod(pushK8s(t, reg)), "main.k": k8sProgram})
	obj := f.waitReady(f.create("app", nil))
	f.g.Expect(obj.Status.Inventory).To(Equal([]kclv1.ObjectReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "from-schema"}}))
	_, body := fetch(f.g, latestYAML(obj))
	f.g.Expect(body).To(ContainSubstring("source: oci"))
}

func TestPrivateRegistryNeedsItsSecret(t *testing.T) {
	f := newFixture(t)
	reg := kclmodtest.StartRegistry(t, "robot", "s3cret-pw")
	f.commit("aaa", map[string]string{"kcl.mod": appMod(pushK8s(t, reg)), "main.k": k8sProgram})
	obj := f.create("app", nil)
	obj = f.waitFor(obj, metav1.ConditionFalse, kclv1.DependencyFailedReason)
	msg := conditions.GetMessage(obj, meta.ReadyCondition)
	f.g.Expect(strings.ToLower(msg)).To(ContainSubstring("authentication"))
	f.g.Expect(msg).To(ContainSubstring("k8s"))

	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: f.ns},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfigJSON()}}
	f.g.Expect(k8sClient.Create(f.ctx, s)).To(Succeed())
	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.RegistrySecretRef = &kclv1.LocalObjectReference{Name: "regcred"}
	})
	obj = f.waitReady(obj)
	f.g.Expect(obj.Status.Inventory[0].Name).To(Equal("from-schema"))
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).NotTo(ContainSubstring("s3cret-pw"))
}

func TestLockChecksumMismatchIsRefused(t *testing.T) {
	f := newFixture(t)
	reg := kclmodtest.StartRegistry(t, "", "")
	dep := pushK8s(t, reg)
	lock := kclmodtest.OCILock("k8s", "1.31.2", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", reg.Host, "kcl-lang/k8s")
	f.commit("aaa", map[string]string{"kcl.mod": appMod(dep), "kcl.mod.lock": lock, "main.k": k8sProgram})
	obj := f.waitFor(f.create("app", nil), metav1.ConditionFalse, kclv1.DependencyFailedReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="))
	f.g.Expect(obj.Status.Artifact).To(BeNil())
}

// A kcl.mod naming the cloud metadata address (or any link-local one) is refused before any
// connection, and the message says only that the host is not allowed.
func TestDependencyOnAnInternalAddressIsRefused(t *testing.T) {
	f := newFixture(t)
	dep := `k8s = { oci = "oci://169.254.169.254/kcl-lang/k8s", tag = "1.31.2" }`
	f.commit("aaa", map[string]string{"kcl.mod": appMod(dep), "main.k": k8sProgram})
	obj := f.waitFor(f.create("app", nil), metav1.ConditionFalse, kclv1.DependencyFailedReason)
	msg := conditions.GetMessage(obj, meta.ReadyCondition)
	f.g.Expect(msg).To(ContainSubstring("host not allowed"))
	f.g.Expect(msg).NotTo(ContainSubstring("timeout"))
	f.g.Expect(msg).NotTo(ContainSubstring("connection refused"))
}
