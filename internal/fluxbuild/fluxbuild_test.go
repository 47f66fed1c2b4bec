package fluxbuild

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const stream = `apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
data:
  env: ${ENV}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
---
apiVersion: v1
kind: Secret
metadata:
  name: creds
stringData:
  password: hunter2
`

func TestBuildDoesWhatKustomizeControllerDoes(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "manifests.yaml"), []byte(stream), 0o600); err != nil {
		t.Fatal(err)
	}
	ks := &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "flux"},
		Spec: kustomizev1.KustomizationSpec{
			TargetNamespace: "team-a", NamePrefix: "p-", NameSuffix: "-s",
			CommonMetadata: &kustomizev1.CommonMetadata{Labels: map[string]string{"team": "a"},
				Annotations: map[string]string{"owner": "ops"}},
			Images: []kustomize.Image{{Name: "nginx", NewTag: "1.28"}},
			Patches: []kustomize.Patch{{Target: &kustomize.Selector{Kind: "Deployment"},
				Patch: `[{"op":"add","path":"/spec/replicas","value":3}]`}},
			PostBuild: &kustomizev1.PostBuild{Substitute: map[string]string{"ENV": "prod"}},
		},
	}
	objs, err := Build(context.Background(), dir, ks, nil)
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byKind[o.GetKind()] = o
		if o.GetNamespace() != "team-a" {
			t.Errorf("%s namespace %q, want team-a", o.GetKind(), o.GetNamespace())
		}
		l := o.GetLabels()
		if l["team"] != "a" || l[OwnerGroup+"/name"] != "app" || l[OwnerGroup+"/namespace"] != "flux" {
			t.Errorf("%s labels %v", o.GetKind(), l)
		}
		if o.GetAnnotations()["owner"] != "ops" {
			t.Errorf("%s annotations %v", o.GetKind(), o.GetAnnotations())
		}
	}
	if got := byKind["ConfigMap"]; got.GetName() != "p-app-config-s" {
		t.Errorf("ConfigMap name %q", got.GetName())
	} else if v, _, _ := unstructured.NestedString(got.Object, "data", "env"); v != "prod" {
		t.Errorf("postBuild: env %q, want prod", v)
	}
	d := byKind["Deployment"]
	if r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); r != 3 {
		t.Errorf("patch: replicas %d, want 3", r)
	}
	cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	if img := cs[0].(map[string]any)["image"]; img != "nginx:1.28" {
		t.Errorf("images: %v, want nginx:1.28", img)
	}
	// normalized as ssa does before applying: stringData becomes data
	if _, ok, _ := unstructured.NestedMap(byKind["Secret"].Object, "stringData"); ok {
		t.Error("the Secret kept stringData: not normalized")
	}
}

func TestBuildErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "manifests.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "flux"}}
	if _, err := Build(context.Background(), dir, ks, nil); err == nil {
		t.Fatal("an object without a name built")
	}
}
