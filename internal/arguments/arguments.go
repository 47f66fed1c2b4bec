// Package arguments gathers a KCLArtifact's top-level KCL arguments from its spec and from the
// ConfigMaps and Secrets it names. Values can hold secrets: callers must not log or report them.
package arguments

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
)

// Gather returns the arguments sorted by name: argumentsFrom in order (a later source overrides an
// earlier one), then spec.arguments over them all.
func Gather(ctx context.Context, c client.Reader, obj *kclv1.KCLArtifact) ([]render.Argument, error) {
	args, _, err := GatherSensitive(ctx, c, obj)
	return args, err
}

// GatherSensitive is Gather, and the values read from Secrets: a diff masks them wherever the
// program put them.
func GatherSensitive(ctx context.Context, c client.Reader, obj *kclv1.KCLArtifact) ([]render.Argument, []string, error) {
	values := map[string]string{}
	var sensitive []string
	for _, ref := range obj.Spec.ArgumentsFrom {
		data, err := read(ctx, c, obj.GetNamespace(), ref)
		if err != nil {
			return nil, nil, err
		}
		picked := map[string]string{}
		if err := pick(picked, data, ref); err != nil {
			return nil, nil, err
		}
		for k, v := range picked {
			values[k] = v
			if ref.Kind == "Secret" {
				sensitive = append(sensitive, v)
			}
		}
	}
	for k, v := range obj.Spec.Arguments {
		values[k] = v
	}
	args := make([]render.Argument, 0, len(values))
	for k, v := range values {
		args = append(args, render.Argument{Name: k, Value: v})
	}
	sort.Slice(args, func(i, j int) bool { return args[i].Name < args[j].Name })
	sort.Strings(sensitive)
	return args, sensitive, nil
}

// read returns the object's data, nil for a missing optional object.
func read(ctx context.Context, c client.Reader, ns string, ref kclv1.ArgumentsReference) (map[string]string, error) {
	key := types.NamespacedName{Namespace: ns, Name: ref.Name}
	data := map[string]string{}
	var err error
	switch ref.Kind {
	case "ConfigMap":
		var cm corev1.ConfigMap
		if err = c.Get(ctx, key, &cm); err == nil {
			for k, v := range cm.Data {
				data[k] = v
			}
		}
	case "Secret":
		var s corev1.Secret
		if err = c.Get(ctx, key, &s); err == nil {
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
	default:
		return nil, fmt.Errorf("argumentsFrom: unsupported kind %q", ref.Kind)
	}
	if apierrors.IsNotFound(err) {
		if ref.Optional {
			return nil, nil
		}
		return nil, fmt.Errorf("argumentsFrom: %s %s/%s not found", ref.Kind, ns, ref.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("argumentsFrom: reading %s %s/%s: %w", ref.Kind, ns, ref.Name, err)
	}
	return data, nil
}

func pick(into, data map[string]string, ref kclv1.ArgumentsReference) error {
	if data == nil {
		return nil
	}
	if len(ref.Keys) == 0 {
		for k, v := range data {
			into[k] = v
		}
		return nil
	}
	for _, k := range ref.Keys {
		v, ok := data[k]
		if !ok {
			if ref.Optional {
				continue
			}
			return fmt.Errorf("argumentsFrom: %s %s has no key %q", ref.Kind, ref.Name, k)
		}
		into[k] = v
	}
	return nil
}

// SensitiveFunc returns the values a KCLArtifact reads from Secrets, for views that mask them.
type SensitiveFunc func(ctx context.Context, namespace, name string) ([]string, error)

// SensitiveFrom reads the KCLArtifact through objects (the controller's cache) and its Secrets
// through secrets (the API server: Secrets are not cached by default). The values are the
// current ones: a value rotated out of a Secret is no longer masked in older artifacts' diffs.
func SensitiveFrom(objects, secrets client.Reader) SensitiveFunc {
	return func(ctx context.Context, namespace, name string) ([]string, error) {
		obj := &kclv1.KCLArtifact{}
		if err := objects.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj); err != nil {
			return nil, err
		}
		fromSecrets := &kclv1.KCLArtifact{ObjectMeta: obj.ObjectMeta}
		for _, ref := range obj.Spec.ArgumentsFrom {
			if ref.Kind == "Secret" {
				ref.Optional = true // a missing Secret has no value to hide
				fromSecrets.Spec.ArgumentsFrom = append(fromSecrets.Spec.ArgumentsFrom, ref)
			}
		}
		_, values, err := GatherSensitive(ctx, secrets, fromSecrets)
		return values, err
	}
}
