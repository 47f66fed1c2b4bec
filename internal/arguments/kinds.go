package arguments

import (
	"fmt"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/apis/acl"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// ImagePolicy is the kind of Flux's image policies, read as image.toolkit.fluxcd.io/v1.
var ImagePolicy = schema.GroupVersionKind{Group: "image.toolkit.fluxcd.io", Version: "v1", Kind: imagePolicyKind}

const imagePolicyKind = "ImagePolicy"

// Kinds are the kinds the operator lets KCLArtifacts read arguments from with expressions
// (--arguments-from-kinds), each at one version: the one the controller watches.
type Kinds struct {
	byGroupKind map[schema.GroupKind]schema.GroupVersionKind
	any         bool
}

// AnyKind allows every kind, at the version a reference names: for `render` on a laptop, where
// what may be read is what the user's own credentials may read.
func AnyKind() *Kinds { return &Kinds{any: true} }

// ParseKinds reads `<group>/<version>/<Kind>` (`v1/<Kind>` for the core group) items. Secrets
// are refused: they are read with kind Secret, whose values are masked everywhere, never by an
// expression whose result the history would show.
func ParseKinds(items []string) (*Kinds, error) {
	k := &Kinds{byGroupKind: map[schema.GroupKind]schema.GroupVersionKind{}}
	for _, item := range items {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		i := strings.LastIndex(item, "/")
		if i <= 0 || i == len(item)-1 {
			return nil, fmt.Errorf("%q: want <group>/<version>/<Kind>, or v1/<Kind> for the core group", item)
		}
		gv, err := schema.ParseGroupVersion(item[:i])
		if err != nil {
			return nil, fmt.Errorf("%q: %w", item, err)
		}
		gvk := gv.WithKind(item[i+1:])
		switch {
		case gvk.Group == "" && gvk.Kind == "Secret":
			return nil, fmt.Errorf("%q: Secrets are read with argumentsFrom kind Secret, whose values stay masked", item)
		case builtinGroupKind(gvk.GroupKind()):
			return nil, fmt.Errorf("%q: %s is read by argumentsFrom kind %s already", item, gvk.Kind, gvk.Kind)
		}
		k.byGroupKind[gvk.GroupKind()] = gvk
	}
	return k, nil
}

// List returns the kinds, sorted.
func (k *Kinds) List() []schema.GroupVersionKind {
	if k == nil {
		return nil
	}
	var out []schema.GroupVersionKind
	for _, gvk := range k.byGroupKind {
		out = append(out, gvk)
	}
	slices.SortFunc(out, func(a, b schema.GroupVersionKind) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// String lists the kinds as the flag takes them.
func (k *Kinds) String() string {
	var s []string
	for _, gvk := range k.List() {
		s = append(s, gvk.GroupVersion().String()+"/"+gvk.Kind)
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// lookup returns the version the controller reads a reference's group and kind at.
func (k *Kinds) lookup(ref kclv1.ArgumentsReference) (schema.GroupVersionKind, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || ref.APIVersion == "" {
		return schema.GroupVersionKind{}, &Error{Reason: kclv1.ArgumentsFailedReason, Stalled: true,
			Err: fmt.Errorf("argumentsFrom %s %s: apiVersion %q is not <group>/<version>", ref.Kind, ref.Name, ref.APIVersion)}
	}
	gk := schema.GroupKind{Group: gv.Group, Kind: ref.Kind}
	if k != nil && k.any {
		return gv.WithKind(ref.Kind), nil
	}
	if k != nil {
		if gvk, ok := k.byGroupKind[gk]; ok {
			return gvk, nil
		}
	}
	return schema.GroupVersionKind{}, &Error{Reason: acl.AccessDeniedReason, Stalled: true, Err: fmt.Errorf(
		"argumentsFrom %s %s: kind %s is not one the operator allows (--arguments-from-kinds: %s); it was not read",
		gkString(gk), ref.Name, gkString(gk), k.String())}
}

func gkString(gk schema.GroupKind) string {
	if gk.Group == "" {
		return gk.Kind
	}
	return gk.Kind + "." + gk.Group
}

// builtin returns the built-in kind a reference names, "" for another kind.
func builtin(ref kclv1.ArgumentsReference) string {
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	if ref.APIVersion == "" || builtinGroupKind(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}) {
		return ref.Kind
	}
	return ""
}

func builtinGroupKind(gk schema.GroupKind) bool {
	switch gk {
	case schema.GroupKind{Kind: "ConfigMap"}, schema.GroupKind{Kind: "Secret"},
		ImagePolicy.GroupKind(), kclv1.GroupVersion.WithKind(kclv1.KCLArtifactKind).GroupKind():
		return true
	}
	return false
}

// checkShape refuses the fields that do not apply to the kind: values on a Secret would show
// its data unmasked; keys or as elsewhere would be silently ignored.
func checkShape(ref kclv1.ArgumentsReference) error {
	kind := builtin(ref)
	var bad string
	switch {
	case ref.APIVersion == "" && kind != "ConfigMap" && kind != "Secret" && kind != imagePolicyKind && kind != kclv1.KCLArtifactKind:
		bad = "apiVersion is required for kinds other than ConfigMap, Secret, ImagePolicy and KCLArtifact"
	case kind != "" && len(ref.Values) > 0:
		bad = "values read other kinds; a " + kind + " is read with keys"
	case kind == "" && len(ref.Values) == 0:
		bad = "values are required for kind " + ref.Kind
	case kind == "" && len(ref.Keys) > 0, kind == imagePolicyKind && len(ref.Keys) > 0:
		bad = "keys apply to ConfigMaps, Secrets and KCLArtifacts"
	case kind != imagePolicyKind && ref.As != "":
		bad = "as applies to ImagePolicies"
	}
	if bad == "" {
		return nil
	}
	return &Error{Reason: kclv1.ArgumentsFailedReason, Stalled: true, Err: fmt.Errorf("argumentsFrom %s %s: %s", ref.Kind, ref.Name, bad)}
}

// IndexKey is how a KCLArtifact's reference is indexed: `<Kind>/<name>` for the built-in
// kinds, `<Kind>.<group>/<name>` for the others.
func IndexKey(ref kclv1.ArgumentsReference) string {
	if k := builtin(ref); k != "" {
		return k + "/" + ref.Name
	}
	gv, _ := schema.ParseGroupVersion(ref.APIVersion)
	return gkString(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}) + "/" + ref.Name
}

// ObjectIndexKey is IndexKey of the references that name an object of kind gk.
func ObjectIndexKey(gk schema.GroupKind, name string) string {
	if builtinGroupKind(gk) {
		return gk.Kind + "/" + name
	}
	return gkString(gk) + "/" + name
}

// ImagePoliciesServed tells whether the API server serves ImagePolicies at the version read.
func ImagePoliciesServed(mapper apimeta.RESTMapper) (bool, error) {
	_, err := mapper.RESTMapping(ImagePolicy.GroupKind(), ImagePolicy.Version)
	if apimeta.IsNoMatchError(err) {
		return false, nil
	}
	return err == nil, err
}
