package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// installation is config/default built with kustomize.
type installation struct {
	dir       string
	objects   []*unstructured.Unstructured
	namespace string // of the Namespace object
	saName    string // the Deployment's serviceAccountName
}

// realKinds are installed for real before the controller starts: it runs as the service account
// with exactly this RBAC. The CRD is installed by the environment (config/crd/bases); the
// Deployment cannot run here (no kubelet): the controller runs as a process instead.
var realKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}

// kustomizeBuild is `kustomize build dir`.
func kustomizeBuild(dir string) ([]*unstructured.Unstructured, error) {
	if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); err != nil {
		return nil, fmt.Errorf("no kustomization.yaml in %s: %w", dir, err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objects []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		// through JSON: the map of r.Map() holds Go ints, which unstructured cannot deep-copy
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("%s: %w", r.CurId(), err)
		}
		objects = append(objects, u)
	}
	return objects, nil
}

func buildInstallation(dir string) (*installation, error) {
	objects, err := kustomizeBuild(dir)
	if err != nil {
		return nil, err
	}
	inst := &installation{dir: dir, objects: objects}

	var namespaces, deployments []*unstructured.Unstructured
	for _, o := range inst.objects {
		switch o.GetKind() {
		case "Namespace":
			namespaces = append(namespaces, o)
		case "Deployment":
			deployments = append(deployments, o)
		}
	}
	if len(namespaces) != 1 {
		return nil, fmt.Errorf("%s: want exactly one Namespace, got %d", dir, len(namespaces))
	}
	inst.namespace = namespaces[0].GetName()
	if len(deployments) != 1 {
		return nil, fmt.Errorf("%s: want exactly one Deployment, got %d", dir, len(deployments))
	}
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(deployments[0].Object, &dep); err != nil {
		return nil, fmt.Errorf("Deployment %s: %w", deployments[0].GetName(), err)
	}
	inst.saName = dep.Spec.Template.Spec.ServiceAccountName
	if inst.saName == "" {
		return nil, fmt.Errorf("Deployment %s/%s has no serviceAccountName", dep.Namespace, dep.Name)
	}
	if dep.Namespace != inst.namespace {
		return nil, fmt.Errorf("Deployment %s is in namespace %q, not %q", dep.Name, dep.Namespace, inst.namespace)
	}
	if inst.find("ServiceAccount", inst.namespace, inst.saName) == nil {
		return nil, fmt.Errorf("the Deployment runs as ServiceAccount %s/%s, which %s does not define",
			inst.namespace, inst.saName, dir)
	}
	return inst, nil
}

// serviceAccount is "namespace/name" of the controller's service account.
func (inst *installation) serviceAccount() string { return inst.namespace + "/" + inst.saName }

func (inst *installation) find(kind, namespace, name string) *unstructured.Unstructured {
	for _, o := range inst.objects {
		if o.GetKind() == kind && o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	return nil
}

// installForReal applies the namespace, service account and RBAC, in that order.
func (inst *installation) installForReal(ctx context.Context, c client.Client) error {
	var errs []error
	for _, kind := range realKinds {
		for _, o := range inst.objects {
			if o.GetKind() != kind {
				continue
			}
			if err := apply(ctx, c, o); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", kind, objectName(o), err))
			}
		}
	}
	return errors.Join(errs...)
}

func apply(ctx context.Context, c client.Client, o *unstructured.Unstructured, opts ...client.ApplyOption) error {
	opts = append([]client.ApplyOption{client.FieldOwner(fieldOwner), client.ForceOwnership}, opts...)
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...)
}

func objectName(o client.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// TestInstallManifests (case 10): every object of config/default passes a server-side apply dry
// run, and the manifests hang together. The namespace, service account and RBAC were installed
// for real by TestMain, and the whole suite runs the controller as that service account.
func TestInstallManifests(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := suite.env.Client
	inst := suite.install

	kinds := map[string]int{}
	for _, o := range inst.objects {
		kinds[o.GetKind()]++
		if err := apply(ctx, c, o, client.DryRunAll); err != nil {
			t.Errorf("server-side apply dry run of %s %s from %s: %v", o.GetKind(), objectName(o), inst.dir, err)
			continue
		}
		namespaced, err := c.IsObjectNamespaced(o)
		if err != nil {
			t.Errorf("%s %s: %v", o.GetKind(), objectName(o), err)
		} else if namespaced && o.GetNamespace() != inst.namespace {
			t.Errorf("%s %s is not in the install namespace %s", o.GetKind(), objectName(o), inst.namespace)
		}
	}
	t.Logf("%s: %d objects %v passed a server-side apply dry run", inst.dir, len(inst.objects), kinds)
	for _, kind := range append(slices.Clone(realKinds), "CustomResourceDefinition", "Deployment", "Service") {
		if kinds[kind] == 0 {
			t.Errorf("%s defines no %s", inst.dir, kind)
		}
	}
	if inst.find("CustomResourceDefinition", "", "kclartifacts.kcl.contrib.fluxcd.io") == nil {
		t.Errorf("%s does not install the KCLArtifact CRD", inst.dir)
	}

	// The objects installed for real are there.
	for _, o := range inst.objects {
		if !slices.Contains(realKinds, o.GetKind()) {
			continue
		}
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("%s %s installed by TestMain: %v", o.GetKind(), objectName(o), err)
		}
	}

	// The Deployment runs the controller the way this suite does: leader election needs
	// RUNTIME_NAMESPACE; the Service reaches the artifact server.
	var dep appsv1.Deployment
	var svc corev1.Service
	for _, o := range inst.objects {
		switch o.GetKind() {
		case "Deployment":
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &dep); err != nil {
				t.Fatal(err)
			}
		case "Service":
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &svc); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(dep.Spec.Template.Spec.Containers) == 0 {
		t.Fatalf("Deployment %s has no container", dep.Name)
	}
	ctr := dep.Spec.Template.Spec.Containers[0]
	if slices.Contains(ctr.Args, "--enable-leader-election") || slices.Contains(ctr.Args, "--enable-leader-election=true") {
		if !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "RUNTIME_NAMESPACE" }) {
			t.Errorf("Deployment %s enables leader election without RUNTIME_NAMESPACE in its environment", dep.Name)
		}
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("Service %s selects %s=%s, which the Deployment's pods do not carry (%v)", svc.Name, k, v, dep.Spec.Template.Labels)
		}
	}
	for _, p := range svc.Spec.Ports {
		if p.TargetPort.StrVal == "" {
			continue
		}
		if !slices.ContainsFunc(ctr.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.TargetPort.StrVal }) {
			t.Errorf("Service %s targets port %q, which container %s does not name", svc.Name, p.TargetPort.StrVal, ctr.Name)
		}
	}
	if !strings.Contains(strings.Join(ctr.Args, " "), "--storage-adv-addr=") {
		t.Errorf("Deployment %s does not set --storage-adv-addr: artifact URLs would not reach the Service", dep.Name)
	}
	if !strings.Contains(strings.Join(ctr.Args, " "), "--events-addr=http://notification-controller.") {
		t.Errorf("Deployment %s does not send events to notification-controller (--events-addr)", dep.Name)
	}
	// The binary knows every flag of the Deployment: a typo would be a crash loop. Flags are
	// parsed in order, so a final --help exits 0 only when all before it parsed.
	if out, err := exec.CommandContext(ctx, suite.binary, append(slices.Clone(ctr.Args), "--help")...).CombinedOutput(); err != nil {
		t.Errorf("the Deployment's arguments %v do not parse: %v\n%s", ctr.Args, err, out)
	}
	checkEventsNetworkPolicy(t, inst, dep)
}

// checkEventsNetworkPolicy: each NetworkPolicy of config/flux-system (to notification-controller's
// events, to source-controller's artifacts) admits the Deployment's pods, from the install
// namespace, and applies (dry run) in Flux's namespace.
func checkEventsNetworkPolicy(t *testing.T, inst *installation, dep appsv1.Deployment) {
	objects, err := kustomizeBuild(filepath.Join(suite.repo, "config", "flux-system"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objects) == 0 {
		t.Fatal("config/flux-system: no objects")
	}
	flux := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "flux-system"}}
	if err := suite.env.Client.Create(t.Context(), flux); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, obj := range objects {
		if obj.GetKind() != "NetworkPolicy" || obj.GetNamespace() != "flux-system" {
			t.Fatalf("config/flux-system: want NetworkPolicies in flux-system, got %s %s/%s", obj.GetKind(),
				obj.GetNamespace(), obj.GetName())
		}
		var np networkingv1.NetworkPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &np); err != nil {
			t.Fatal(err)
		}
		peer := np.Spec.Ingress[0].From[0]
		if got := peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]; got != inst.namespace {
			t.Errorf("NetworkPolicy %s admits namespace %q, not the install namespace %q", np.Name, got, inst.namespace)
		}
		for k, v := range peer.PodSelector.MatchLabels {
			if dep.Spec.Template.Labels[k] != v {
				t.Errorf("NetworkPolicy %s admits pods with %s=%s, which the Deployment's pods do not carry", np.Name, k, v)
			}
		}
		if err := apply(t.Context(), suite.env.Client, obj, client.DryRunAll); err != nil {
			t.Errorf("server-side apply dry run of NetworkPolicy %s: %v", np.Name, err)
		}
	}
}
