// Package arguments gathers a KCLArtifact's top-level KCL arguments from its spec and from the
// objects of its namespace that argumentsFrom names: ConfigMaps, Secrets, ImagePolicies, other
// KCLArtifacts' exports, and the kinds the operator allows. Values can hold secrets: callers
// must not log or report them, except as Result.Inputs, where Secret values are masked.
package arguments

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
)

// Gatherer reads the arguments of KCLArtifacts.
type Gatherer struct {
	// Reader reads the objects: the controller's cache.
	Reader client.Reader
	// Kinds are the kinds the operator allows beyond the built-in ones; nil allows none.
	Kinds *Kinds
	// NoImagePolicies is set when the API server does not serve ImagePolicies.
	NoImagePolicies bool
	// ExpressionBudget is the wall-clock time each expression's evaluation may take
	// (--expression-time-budget); 0 is inputexpr.DefaultTimeBudget.
	ExpressionBudget time.Duration
}

// Result is what a KCLArtifact's arguments are.
type Result struct {
	// Args sorted by name.
	Args []render.Argument
	// Sensitive are the values read from Secrets, masked wherever the program put them.
	Sensitive []string
	// Inputs are the arguments as the history records them: Secret values masked, long values cut.
	Inputs []kclv1.InputValue
}

// Error is an argumentsFrom that cannot be read, with the condition reason that names it.
type Error struct {
	Reason string
	// Stalled tells that only a change of the KCLArtifact's spec (or of the operator's flags) helps.
	Stalled bool
	Err     error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func refError(reason string, ref kclv1.ArgumentsReference, format string, args ...any) *Error {
	return &Error{Reason: reason, Err: fmt.Errorf("argumentsFrom %s %s: %s", ref.Kind, ref.Name, fmt.Sprintf(format, args...))}
}

// argument is one value read, before precedence is applied.
type argument struct {
	value, text string // as KCL receives it, as people see it
	from        string // Kind/name, "" for spec.arguments
	secret      bool
}

// MaxExpressions bounds the expressions of one KCLArtifact's argumentsFrom: each is bounded in
// cost, and every reconcile evaluates them all.
const MaxExpressions = 32

// Gather reads every argument of obj, sorted by name: argumentsFrom in order (a later source
// overrides an earlier one), then spec.arguments over them all.
func (g *Gatherer) Gather(ctx context.Context, obj *kclv1.KCLArtifact) (*Result, error) {
	n := 0
	for _, ref := range obj.Spec.ArgumentsFrom {
		n += len(ref.Values)
	}
	if n > MaxExpressions {
		return nil, &Error{Reason: kclv1.ArgumentsFailedReason, Stalled: true,
			Err: fmt.Errorf("argumentsFrom has %d values, more than %d", n, MaxExpressions)}
	}
	values := map[string]argument{}
	for _, ref := range obj.Spec.ArgumentsFrom {
		read, err := g.read(ctx, obj, ref)
		if err != nil {
			return nil, err
		}
		for k, a := range read {
			a.from = ref.Kind + "/" + ref.Name
			values[k] = a
		}
	}
	for k, v := range obj.Spec.Arguments {
		values[k] = argument{value: v, text: v}
	}
	return result(values), nil
}

func result(values map[string]argument) *Result {
	res := &Result{Args: make([]render.Argument, 0, len(values))}
	for k, a := range values {
		res.Args = append(res.Args, render.Argument{Name: k, Value: a.value})
		if a.secret {
			res.Sensitive = append(res.Sensitive, a.value)
		}
	}
	sort.Slice(res.Args, func(i, j int) bool { return res.Args[i].Name < res.Args[j].Name })
	sort.Strings(res.Sensitive)
	res.Inputs = inputs(values)
	return res
}

// read returns the arguments one reference gives, by name.
func (g *Gatherer) read(ctx context.Context, obj *kclv1.KCLArtifact, ref kclv1.ArgumentsReference) (map[string]argument, error) {
	if err := checkShape(ref); err != nil {
		return nil, err
	}
	if g.Reader == nil {
		return nil, refError(kclv1.ArgumentsFailedReason, ref, "no cluster to read it from")
	}
	switch builtin(ref) {
	case "ConfigMap", "Secret":
		return g.readData(ctx, obj.GetNamespace(), ref)
	case imagePolicyKind:
		return g.readImagePolicy(ctx, obj.GetNamespace(), ref)
	case kclv1.KCLArtifactKind:
		return g.readExports(ctx, obj, ref)
	}
	return g.readObject(ctx, obj.GetNamespace(), ref)
}

// readData reads the keys of a ConfigMap or Secret.
func (g *Gatherer) readData(ctx context.Context, ns string, ref kclv1.ArgumentsReference) (map[string]argument, error) {
	data, err := readData(ctx, g.Reader, ns, ref)
	if err != nil {
		return nil, err
	}
	picked := map[string]string{}
	if err := pick(picked, data, ref); err != nil {
		return nil, &Error{Reason: kclv1.ArgumentsFailedReason, Err: err}
	}
	out := make(map[string]argument, len(picked))
	for k, v := range picked {
		out[k] = argument{value: v, text: v, secret: ref.Kind == "Secret"}
	}
	return out, nil
}

// readData returns the object's data, nil for a missing optional object.
func readData(ctx context.Context, c client.Reader, ns string, ref kclv1.ArgumentsReference) (map[string]string, error) {
	key := types.NamespacedName{Namespace: ns, Name: ref.Name}
	data := map[string]string{}
	var err error
	if ref.Kind == "ConfigMap" {
		var cm corev1.ConfigMap
		if err = c.Get(ctx, key, &cm); err == nil {
			for k, v := range cm.Data {
				data[k] = v
			}
		}
	} else {
		var s corev1.Secret
		if err = c.Get(ctx, key, &s); err == nil {
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
	}
	if apierrors.IsNotFound(err) {
		if ref.Optional {
			return nil, nil
		}
		return nil, &Error{Reason: kclv1.ArgumentsFailedReason, Err: fmt.Errorf("argumentsFrom: %s %s/%s not found", ref.Kind, ns, ref.Name)}
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

// AsError returns err as an *Error, nil when it is not one.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
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
		res, err := (&Gatherer{Reader: secrets}).Gather(ctx, fromSecrets)
		if err != nil {
			return nil, err
		}
		return res.Sensitive, nil
	}
}

// SecretInputs names the Secrets obj reads arguments from (`Secret/<name>`, in spec order),
// whether or not they exist: every value it renders may be derived from them.
func SecretInputs(obj *kclv1.KCLArtifact) []string {
	var out []string
	for _, ref := range obj.Spec.ArgumentsFrom {
		if builtin(ref) == "Secret" {
			out = append(out, "Secret/"+ref.Name)
		}
	}
	return out
}
