package node

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/acl"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
	"github.com/kcl-flux/kcl-artifact-controller/test/nodeinstall"
)

// Two tenants as flux2-multi-tenancy makes them (nodeinstall.TenantYAML): each a namespace, a
// ServiceAccount and a RoleBinding of cluster-admin in that namespace, its own Git repository, and
// KCLArtifacts that name the tenant's account. tenant-a plays the attacker; tenant-b holds what it
// is after. Every attack is set up at once (tenants), and each test waits for its verdict.
const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

// tenantPrograms are the KCL files of a tenant's repository: legit.k stays in the tenant's
// namespace; the others render what its account may not create.
func tenantPrograms(tenant, other string) map[string]string {
	return map[string]string{
		"legit.k": configMapK(tenant, "tenant-legit"),
		// kept in its namespace, for the attacks on the spec alone
		"own.k":   configMapK(tenant, "tenant-own"),
		"cross.k": configMapK(other, "tenant-stolen"),
		"crb.k": fmt.Sprintf(`[{
    apiVersion = "rbac.authorization.k8s.io/v1"
    kind = "ClusterRoleBinding"
    metadata.name = "%[1]s-escalate"
    roleRef = {apiGroup = "rbac.authorization.k8s.io", kind = "ClusterRole", name = "cluster-admin"}
    subjects = [{kind = "ServiceAccount", name = "%[1]s", namespace = "%[1]s"}]
}]
`, tenant),
		"ns.k": fmt.Sprintf("[{apiVersion = \"v1\", kind = \"Namespace\", metadata.name = \"%s-extra\"}]\n", tenant),
	}
}

func configMapK(ns, name string) string {
	return fmt.Sprintf("[{apiVersion = \"v1\", kind = \"ConfigMap\", metadata = {name = %q, namespace = %q}, data.owner = %q}]\n", name, ns, ns)
}

// tenantAttack is a KCLArtifact of tenant-a: a program (entry) and how its spec differs.
type tenantAttack struct {
	name, entry string
	mutate      func(*kclv1.KustomizationTemplate, *kclv1.KCLArtifactSpec)
}

func asTenant(t *kclv1.KustomizationTemplate, _ *kclv1.KCLArtifactSpec) {
	t.ServiceAccountName = nodeinstall.TenantAccount(tenantA)
}

// tenantAttacks are tenant-a's KCLArtifacts; all but legit and default-sa name tenant-a's account.
var tenantAttacks = []tenantAttack{
	{"legit", "legit.k", asTenant},
	{"cross-ns", "cross.k", asTenant},
	{"crb", "crb.k", asTenant},
	{"namespace", "ns.k", asTenant},
	// no account named: kustomize-controller's --default-service-account, or its own
	{"default-sa", "crb.k", nil},
	{"sa-flux", "own.k", func(t *kclv1.KustomizationTemplate, _ *kclv1.KCLArtifactSpec) {
		t.ServiceAccountName = "kustomize-controller"
	}},
	{"target-b", "own.k", func(t *kclv1.KustomizationTemplate, s *kclv1.KCLArtifactSpec) {
		asTenant(t, s)
		t.TargetNamespace = tenantB
	}},
	{"source-b", "legit.k", func(t *kclv1.KustomizationTemplate, s *kclv1.KCLArtifactSpec) {
		asTenant(t, s)
		s.SourceRef.Namespace, s.SourceRef.Name = tenantB, tenantB
	}},
	{"registry-b", "own.k", func(t *kclv1.KustomizationTemplate, s *kclv1.KCLArtifactSpec) {
		asTenant(t, s)
		s.RegistrySecretRef = &kclv1.LocalObjectReference{Name: "tenant-b-registry"}
	}},
	{"kubeconfig-b", "own.k", func(t *kclv1.KustomizationTemplate, s *kclv1.KCLArtifactSpec) {
		asTenant(t, s)
		t.KubeConfig = &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "tenant-b-kubeconfig"}}
	}},
	{"substitute-b", "own.k", func(t *kclv1.KustomizationTemplate, s *kclv1.KCLArtifactSpec) {
		asTenant(t, s)
		t.PostBuild = &kustomizev1.PostBuild{SubstituteFrom: []kustomizev1.SubstituteReference{{Kind: "Secret", Name: "tenant-b-vars"}}}
	}},
	{"decryption-b", "own.k", func(t *kclv1.KustomizationTemplate, s *kclv1.KCLArtifactSpec) {
		asTenant(t, s)
		t.Decryption = &kustomizev1.Decryption{Provider: "sops", SecretRef: &meta.LocalObjectReference{Name: "tenant-b-sops"}}
	}},
	{"depends-b", "cross.k", func(t *kclv1.KustomizationTemplate, s *kclv1.KCLArtifactSpec) {
		asTenant(t, s)
		t.DependsOn = []kustomizev1.DependencyReference{{Name: "legit", Namespace: tenantB}}
	}},
}

// tenantBSecrets exist only in tenant-b; tenant-a's KCLArtifacts name them.
var tenantBSecrets = map[string]map[string]string{
	"tenant-b-args":       {"message": "tenant-b's secret"},
	"tenant-b-registry":   {".dockerconfigjson": `{"auths":{"registry.tenant-b.test":{"auth":"dGVuYW50LWI6c2VjcmV0"}}}`},
	"tenant-b-kubeconfig": {"value": "apiVersion: v1\nkind: Config\n"},
	"tenant-b-vars":       {"owner": "tenant-b"},
	"tenant-b-sops":       {"identity.agekey": "AGE-SECRET-KEY-1TENANTB"},
}

var (
	tenantsReady bool
	// tenantARevision is the commit of tenant-a's repository
	tenantARevision string
)

// tenants creates both tenants and every attack once for the tests of this file.
func tenants(t *testing.T) {
	t.Helper()
	if tenantsReady {
		return
	}
	ctx := context.Background()
	for _, tenant := range []string{tenantA, tenantB} {
		if _, err := suite.install.Apply(ctx, nodeinstall.TenantYAML(tenant)); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range tenantBSecrets {
		create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: tenantB, Name: name}, StringData: data})
	}
	tenantARevision = gitRevision(createRepo(t, tenantA, tenantA, "node-app", tenantPrograms(tenantA, tenantB)))
	createRepo(t, tenantB, tenantB, "node-app", tenantPrograms(tenantB, tenantA))
	create(t, tenantArtifact(tenantB, "legit", "legit.k", func(k *kclv1.KustomizationTemplate, _ *kclv1.KCLArtifactSpec) {
		k.ServiceAccountName = nodeinstall.TenantAccount(tenantB)
	}))
	for _, a := range tenantAttacks {
		create(t, tenantArtifact(tenantA, a.name, a.entry, a.mutate))
	}
	createArgumentsAttack(t)
	// tenant-b reads tenant-a's rendered output by a Kustomization of its own
	create(t, &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Namespace: tenantB, Name: "read-a"},
		Spec: kustomizev1.KustomizationSpec{Interval: metav1.Duration{Duration: time.Minute}, Path: "./", Prune: true,
			SourceRef: kustomizev1.CrossNamespaceSourceReference{
				Kind: sourcev1.ExternalArtifactKind, Name: "legit", Namespace: tenantA},
			TargetNamespace: tenantB, ServiceAccountName: nodeinstall.TenantAccount(tenantB)}})
	tenantsReady = true
}

func tenantArtifact(ns, name, entry string, mutate func(*kclv1.KustomizationTemplate, *kclv1.KCLArtifactSpec)) *kclv1.KCLArtifact {
	return kclArtifact(ns, name, ns, func(o *kclv1.KCLArtifact) {
		o.Spec.Entries = []string{entry}
		o.Spec.Kustomization = &kclv1.KustomizationTemplate{RetryInterval: &metav1.Duration{Duration: 10 * time.Second}}
		if mutate != nil {
			mutate(o.Spec.Kustomization, &o.Spec)
		}
	})
}

// createArgumentsAttack is tenant-a's KCLArtifact args-b: its argumentsFrom names tenant-b's
// Secret, with a namespace the API does not have. kubectl (strict field validation, its default)
// rejects it; a client that does not ask for validation gets the field pruned.
func createArgumentsAttack(t *testing.T) {
	t.Helper()
	const manifest = `apiVersion: kcl.contrib.fluxcd.io/v1alpha1
kind: KCLArtifact
metadata: {name: args-b, namespace: tenant-a}
spec:
  sourceRef: {kind: GitRepository, name: tenant-a}
  interval: 1m
  entries: [own.k]
  argumentsFrom: [{kind: Secret, name: tenant-b-args, namespace: tenant-b}]
  kustomization: {serviceAccountName: tenant-a}
`
	out, err := suite.install.Apply(context.Background(), manifest)
	if err == nil || !strings.Contains(out, "argumentsFrom[0].namespace") {
		t.Fatalf("kubectl applied an argumentsFrom namespace: %v\n%s", err, out)
	}
	t.Logf("kubectl apply: %s", strings.TrimSpace(out))
	obj := kclArtifact(tenantA, "args-b", tenantA, nil)
	obj.Spec.Entries = []string{"own.k"}
	obj.Spec.Kustomization = &kclv1.KustomizationTemplate{ServiceAccountName: nodeinstall.TenantAccount(tenantA)}
	u, err := toUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"].(map[string]any)["argumentsFrom"] = []any{
		map[string]any{"kind": "Secret", "name": "tenant-b-args", "namespace": tenantB}}
	create(t, u)
}

func toUnstructured(obj *kclv1.KCLArtifact) (*unstructured.Unstructured, error) {
	obj.APIVersion, obj.Kind = kclv1.GroupVersion.String(), kclv1.KCLArtifactKind
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	return &unstructured.Unstructured{Object: m}, err
}

// waitKustomizationRefused waits until the KCLArtifact's KustomizationReady is False for the
// current artifact with a message holding every part, and a Warning event says the same.
func waitKustomizationRefused(t *testing.T, ns, name string, parts ...string) string {
	t.Helper()
	var msg, reason string
	waitFor(t, ns+"/"+name+" refused", func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, name)
		if err != nil {
			return false, "", err
		}
		c := conditions.Get(obj, kclv1.KustomizationReadyCondition)
		if c == nil || c.Status != metav1.ConditionFalse || !containsAll(c.Message, parts) {
			return false, kclState(obj), nil
		}
		msg, reason = c.Reason+": "+c.Message, c.Reason
		return true, "", nil
	})
	t.Logf("%s/%s KustomizationReady=False %s", ns, name, msg)
	e := findEvent(t, ns, name, corev1.EventTypeWarning, reason)
	if !containsAll(e.Message, parts) {
		t.Errorf("the Warning event of %s/%s does not say what was refused: %s", ns, name, e.Message)
	}
	t.Logf("%s/%s event Warning %s: %s", ns, name, e.Reason, e.Message)
	return msg
}

// waitReadyRefused waits until the KCLArtifact's Ready is False with reason and a message holding
// every part, and a Warning event of that reason says the same.
func waitReadyRefused(t *testing.T, ns, name, reason string, parts ...string) {
	t.Helper()
	waitFor(t, ns+"/"+name+" not Ready: "+reason, func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, name)
		if err != nil {
			return false, "", err
		}
		c := conditions.Get(obj, meta.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason && containsAll(c.Message, parts), kclState(obj), nil
	})
	obj, err := getKCLArtifact(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s/%s Ready=False %s (Stalled=%v)", ns, name, readyMessage(obj), conditions.IsStalled(obj))
	if obj.Status.Artifact != nil {
		t.Errorf("%s/%s published an artifact: %s", ns, name, obj.Status.Artifact.Revision)
	}
	e := findEvent(t, ns, name, corev1.EventTypeWarning, reason)
	if !containsAll(e.Message, parts) {
		t.Errorf("the Warning event of %s/%s does not say what was refused: %s", ns, name, e.Message)
	}
	t.Logf("%s/%s event Warning %s: %s", ns, name, e.Reason, e.Message)
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// absent fails the test when the admin client finds the object.
func absent(t *testing.T, obj client.Object) {
	t.Helper()
	err := suite.client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	if err == nil {
		t.Errorf("%T %s/%s was created", obj, obj.GetNamespace(), obj.GetName())
	} else if !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

func account(ns, name string) string {
	return fmt.Sprintf(`User "system:serviceaccount:%s:%s"`, ns, name)
}

// The suite installed kustomize-controller and this controller locked down.
func TestTenantLockdownIsInstalled(t *testing.T) {
	for _, d := range []struct {
		ns, name string
		flags    []string
	}{
		{"flux-system", "kustomize-controller", []string{"--no-cross-namespace-refs=true", "--default-service-account=default"}},
		{controllerNS, "kcl-artifact-controller", []string{"--no-cross-namespace-refs=true"}},
	} {
		var dep appsv1.Deployment
		if err := suite.client.Get(context.Background(), client.ObjectKey{Namespace: d.ns, Name: d.name}, &dep); err != nil {
			t.Fatal(err)
		}
		args := dep.Spec.Template.Spec.Containers[0].Args
		for _, f := range d.flags {
			if !slices.Contains(args, f) {
				t.Errorf("%s/%s runs without %s: %v", d.ns, d.name, f, args)
			}
		}
	}
}

// A tenant's program renders into the other tenant's namespace, a ClusterRoleBinding to
// cluster-admin, a Namespace: kustomize-controller applies as the tenant's account, which may
// not, and nothing is created. Without an account named, --default-service-account applies as the
// namespace's default account, which may do nothing (without it, kustomize-controller's own
// cluster-admin would create the ClusterRoleBinding).
func TestTenantRenderedObjectsOutsideTheTenantAreRefused(t *testing.T) {
	tenants(t)
	tenantAccount := account(tenantA, nodeinstall.TenantAccount(tenantA))
	t.Run("into the other tenant's namespace", func(t *testing.T) {
		waitKustomizationRefused(t, tenantA, "cross-ns", "ConfigMap/tenant-b/tenant-stolen", "forbidden", tenantAccount,
			`in the namespace "tenant-b"`)
		absent(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenantB, Name: "tenant-stolen"}})
	})
	t.Run("a ClusterRoleBinding to cluster-admin", func(t *testing.T) {
		waitKustomizationRefused(t, tenantA, "crb", "ClusterRoleBinding/tenant-a-escalate", "forbidden", tenantAccount)
		absent(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a-escalate"}})
	})
	t.Run("a Namespace", func(t *testing.T) {
		waitKustomizationRefused(t, tenantA, "namespace", "Namespace/tenant-a-extra", "forbidden", tenantAccount)
		absent(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a-extra"}})
	})
	t.Run("no account named", func(t *testing.T) {
		waitKustomizationRefused(t, tenantA, "default-sa", "ClusterRoleBinding/tenant-a-escalate", "forbidden",
			account(tenantA, "default"))
		absent(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a-escalate"}})
	})
}

// A tenant's KCLArtifact names what is not the tenant's: another account, the other tenant's
// namespace as target, its source, its Secrets (argumentsFrom, registrySecretRef, kubeConfig,
// postBuild.substituteFrom, decryption), its Kustomization as a dependency. Each is refused with a
// condition that says why; none gives the tenant anything of the other's.
func TestTenantSpecReferencesOutsideTheTenantAreRefused(t *testing.T) {
	tenants(t)
	tenantAccount := account(tenantA, nodeinstall.TenantAccount(tenantA))
	t.Run("another account", func(t *testing.T) {
		// the name is resolved in the Kustomization's namespace: flux-system's account is not reachable
		waitKustomizationRefused(t, tenantA, "sa-flux", "ConfigMap/tenant-a/tenant-own", "forbidden",
			account(tenantA, "kustomize-controller"))
	})
	t.Run("the other tenant's namespace as target", func(t *testing.T) {
		waitKustomizationRefused(t, tenantA, "target-b", "ConfigMap/tenant-b/tenant-own", "forbidden", tenantAccount)
		absent(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenantB, Name: "tenant-own"}})
	})
	t.Run("the other tenant's source", func(t *testing.T) {
		waitReadyRefused(t, tenantA, "source-b", acl.AccessDeniedReason,
			"cross-namespace references are not allowed: GitRepository tenant-b/tenant-b is not in namespace tenant-a")
	})
	t.Run("the other tenant's Secret as arguments", func(t *testing.T) {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(kclv1.GroupVersion.WithKind(kclv1.KCLArtifactKind))
		if err := suite.client.Get(context.Background(), client.ObjectKey{Namespace: tenantA, Name: "args-b"}, obj); err != nil {
			t.Fatal(err)
		}
		refs, _, _ := unstructured.NestedSlice(obj.Object, "spec", "argumentsFrom")
		if len(refs) != 1 || refs[0].(map[string]any)["namespace"] != nil {
			t.Fatalf("argumentsFrom as stored: %v, want the namespace pruned", refs)
		}
		waitReadyRefused(t, tenantA, "args-b", kclv1.ArgumentsFailedReason, "argumentsFrom: Secret tenant-a/tenant-b-args not found")
	})
	t.Run("the other tenant's registry Secret", func(t *testing.T) {
		waitReadyRefused(t, tenantA, "registry-b", kclv1.DependencyFailedReason, "tenant-a/tenant-b-registry", "not found")
	})
	t.Run("the other tenant's kubeConfig Secret", func(t *testing.T) {
		waitKustomizationRefused(t, tenantA, "kubeconfig-b", "tenant-b-kubeconfig", "not found")
	})
	t.Run("the other tenant's postBuild Secret", func(t *testing.T) {
		waitKustomizationRefused(t, tenantA, "substitute-b", "Secret/tenant-b-vars", "not found")
	})
	t.Run("the other tenant's decryption Secret", func(t *testing.T) {
		waitKustomizationRefused(t, tenantA, "decryption-b", "tenant-b-sops", "not found")
	})
	t.Run("a dependency in the other tenant's namespace", func(t *testing.T) {
		// Flux lets dependsOn name another namespace (it only orders); the apply that follows is
		// still the tenant's account's
		waitKustomizationRefused(t, tenantA, "depends-b", "ConfigMap/tenant-b/tenant-stolen", "forbidden", tenantAccount)
	})
	t.Run("the other tenant's ExternalArtifact", func(t *testing.T) {
		var msg string
		waitFor(t, "tenant-b/read-a refused", func(ctx context.Context) (bool, string, error) {
			ks := &kustomizev1.Kustomization{}
			if err := suite.client.Get(ctx, client.ObjectKey{Namespace: tenantB, Name: "read-a"}, ks); err != nil {
				return false, "", err
			}
			msg = conditions.GetReason(ks, meta.ReadyCondition) + ": " + conditions.GetMessage(ks, meta.ReadyCondition)
			return conditions.IsFalse(ks, meta.ReadyCondition) && strings.Contains(msg, "cross-namespace references have been blocked"), msg, nil
		})
		t.Logf("tenant-b/read-a Ready=False %s", msg)
		// tenant-b's own legit.k renders a ConfigMap of that name: it must hold tenant-b's data
		var cm corev1.ConfigMap
		err := suite.client.Get(context.Background(), client.ObjectKey{Namespace: tenantB, Name: "tenant-legit"}, &cm)
		if client.IgnoreNotFound(err) != nil || cm.Data["owner"] == tenantA {
			t.Errorf("tenant-b/tenant-legit holds tenant-a's rendered output (%v): %v", err, cm.Data)
		}
	})
}

// Whatever a tenant's KCLArtifact says, what the controller generates stays in the tenant's
// namespace, applies only the tenant's own ExternalArtifact there, and the apply is the tenant's
// account's: objects it may create are applied (by kustomize-controller, as the field manager
// says), those it may not are refused in its name, never in kustomize-controller's own.
func TestTenantGeneratedKustomizationsStayInTheTenant(t *testing.T) {
	tenants(t)
	waitApplied(t, tenantA, "legit", tenantARevision)
	var cm corev1.ConfigMap
	if err := suite.client.Get(context.Background(), client.ObjectKey{Namespace: tenantA, Name: "tenant-legit"}, &cm); err != nil {
		t.Fatal(err)
	}
	if !managedBy(&cm, "kustomize-controller") {
		t.Errorf("tenant-a/tenant-legit is not applied by kustomize-controller: %v", cm.ManagedFields)
	}
	var list kustomizev1.KustomizationList
	if err := suite.client.List(context.Background(), &list, client.HasLabels{kustomization.GeneratedLabel}); err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	for _, a := range tenantAttacks {
		owners[a.name] = true
	}
	seen := 0
	for _, ks := range list.Items {
		owner := ks.Labels[kustomization.GeneratedLabel]
		if ks.Namespace != tenantA {
			continue
		}
		seen++
		ref := ks.Spec.SourceRef
		if ref.Kind != sourcev1.ExternalArtifactKind || ref.Name != owner || (ref.Namespace != "" && ref.Namespace != tenantA) {
			t.Errorf("Kustomization %s/%s applies %s %s/%s, not its own ExternalArtifact", ks.Namespace, ks.Name, ref.Kind, ref.Namespace, ref.Name)
		}
		if !owners[owner] && owner != "args-b" {
			t.Errorf("Kustomization %s/%s is generated for %q, no KCLArtifact of tenant-a", ks.Namespace, ks.Name, owner)
		}
		msg := conditions.GetMessage(&ks, meta.ReadyCondition)
		if strings.Contains(msg, "forbidden") && !strings.Contains(msg, `User "system:serviceaccount:tenant-a:`) {
			t.Errorf("Kustomization %s/%s was refused as another account than tenant-a's: %s", ks.Namespace, ks.Name, msg)
		}
		if strings.Contains(msg, "system:serviceaccount:flux-system:") {
			t.Errorf("Kustomization %s/%s ran as flux-system's account: %s", ks.Namespace, ks.Name, msg)
		}
	}
	// source-b, args-b and registry-b never published: no Kustomization
	if want := len(tenantAttacks) - 2; seen != want {
		t.Errorf("%d generated Kustomizations in tenant-a, want %d", seen, want)
	}
}

func managedBy(obj client.Object, manager string) bool {
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager == manager && mf.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}
