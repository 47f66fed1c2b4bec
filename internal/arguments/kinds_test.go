package arguments

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func TestParseKinds(t *testing.T) {
	k, err := ParseKinds([]string{"v1/Service", "fluxcd.controlplane.io/v1/ResourceSetInputProvider", " "})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.String(); got != "v1/Service, fluxcd.controlplane.io/v1/ResourceSetInputProvider" {
		t.Errorf("kinds: %s", got)
	}
	for item, want := range map[string]string{
		"v1/Secret":                              "Secrets are read with argumentsFrom kind Secret",
		"v1/ConfigMap":                           "ConfigMap is read by argumentsFrom kind ConfigMap already",
		"image.toolkit.fluxcd.io/v1/ImagePolicy": "ImagePolicy is read by argumentsFrom kind ImagePolicy already",
		"Service":                                "want <group>/<version>/<Kind>",
		"apps/v1/":                               "want <group>/<version>/<Kind>",
	} {
		if _, err := ParseKinds([]string{item}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", item, err, want)
		}
	}
}

// refusingReader fails the test on any read: what is refused must be refused unread.
type refusingReader struct {
	client.Reader
	t *testing.T
}

func (r refusingReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.t.Errorf("read %T %s", obj, key)
	return nil
}

func TestRefusedReferencesAreNeverRead(t *testing.T) {
	kinds, _ := ParseKinds([]string{"v1/Service"})
	g := &Gatherer{Reader: refusingReader{t: t}, Kinds: kinds}
	for name, tc := range map[string]struct {
		ref    kclv1.ArgumentsReference
		reason string
		want   string
	}{
		"a kind not allowed": {kclv1.ArgumentsReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "d",
			Values: []kclv1.ArgumentValue{{Name: "r", FieldPath: ".spec.replicas"}}}, "AccessDenied", "kind Deployment.apps is not one the operator allows (--arguments-from-kinds: v1/Service)"},
		"a Secret by expression": {kclv1.ArgumentsReference{APIVersion: "v1", Kind: "Secret", Name: "s",
			Values: []kclv1.ArgumentValue{{Name: "p", Expression: "object.data.p"}}}, kclv1.ArgumentsFailedReason, "a Secret is read with keys"},
		"values without apiVersion": {kclv1.ArgumentsReference{Kind: "Service", Name: "s",
			Values: []kclv1.ArgumentValue{{Name: "p", FieldPath: ".spec.clusterIP"}}}, kclv1.ArgumentsFailedReason, "apiVersion is required"},
		"keys on an ImagePolicy": {kclv1.ArgumentsReference{Kind: "ImagePolicy", Name: "p", Keys: []string{"x"}},
			kclv1.ArgumentsFailedReason, "keys apply to ConfigMaps, Secrets and KCLArtifacts"},
		"a kind without values": {kclv1.ArgumentsReference{APIVersion: "v1", Kind: "Service", Name: "s"},
			kclv1.ArgumentsFailedReason, "values are required for kind Service"},
	} {
		obj := &kclv1.KCLArtifact{}
		obj.Namespace, obj.Name = "tenant", "app"
		obj.Spec.ArgumentsFrom = []kclv1.ArgumentsReference{tc.ref}
		_, err := g.Gather(context.Background(), obj)
		e := AsError(err)
		if e == nil || e.Reason != tc.reason || !e.Stalled || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %s %q (stalled)", name, err, tc.reason, tc.want)
		}
	}
}

func TestInputsMaskSecretsAndCutLongValues(t *testing.T) {
	res := result(map[string]argument{
		"token": {value: "s3cr3t", text: "s3cr3t", secret: true, from: "Secret/creds"},
		"blob":  {value: strings.Repeat("x", 1000), text: strings.Repeat("x", 1000)},
	})
	for _, in := range res.Inputs {
		if strings.Contains(in.Value, "s3cr3t") || len(in.Value) > maxInputValue {
			t.Errorf("input %s recorded as %q", in.Name, in.Value)
		}
	}
	if len(res.Sensitive) != 1 || res.Sensitive[0] != "s3cr3t" {
		t.Errorf("sensitive: %v", res.Sensitive)
	}
}
