// Package config checks the install manifests of config/ against each other.
package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

const (
	deploymentFile    = "config/manager/deployment.yaml"
	argumentsFromRBAC = "config/rbac/arguments_from_role.yaml"
	roleName          = "kcl-artifact-controller-arguments-from"
	flagName          = "arguments-from-kinds"
)

// TestArgumentsFromRoleGrantsExactlyTheFlagsKinds: the ClusterRole grants get, list and watch
// on exactly the kinds config/manager passes in --arguments-from-kinds: a kind without its rule
// keeps the controller's watch from syncing, a rule without its kind lets the controller read
// objects no KCLArtifact may name.
func TestArgumentsFromRoleGrantsExactlyTheFlagsKinds(t *testing.T) {
	root := fluxenv.MustRepoRoot(t)
	kinds := deploymentKinds(t, root)
	if len(kinds) == 0 {
		t.Fatalf("%s passes no --%s", deploymentFile, flagName)
	}
	var role rbacv1.ClusterRole
	readStrict(t, filepath.Join(root, argumentsFromRBAC), &role)
	if role.Name != roleName {
		t.Errorf("%s: ClusterRole %q, want %q", argumentsFromRBAC, role.Name, roleName)
	}
	for _, d := range differences(kinds, role.Rules) {
		t.Errorf("%s and --%s of %s differ: %s", argumentsFromRBAC, flagName, deploymentFile, d)
	}
}

// The check itself fails on each kind of difference.
func TestDifferencesFindsEachMismatch(t *testing.T) {
	svc := schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	dep := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	read := []string{"get", "list", "watch"}
	for _, c := range []struct {
		name  string
		rules []rbacv1.PolicyRule
		want  []string
	}{
		{"equal, one rule per kind", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: read},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"watch", "get", "list"}},
		}, nil},
		{"one rule for both kinds grants the cross product", []rbacv1.PolicyRule{
			{APIGroups: []string{"", "apps"}, Resources: []string{"services", "deployments"}, Verbs: read},
		}, []string{"apps/services is granted", "core/deployments is granted"}},
		{"a kind without its rule", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: read},
		}, []string{"apps/deployments (apps/v1/Deployment) is not granted"}},
		{"a rule without its kind", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "configmaps"}, Verbs: read},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: read},
		}, []string{"core/configmaps is granted"}},
		{"a verb too many", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: append(read, "update")},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: read},
		}, []string{`verbs [get list watch update], want get, list and watch`}},
		{"a verb missing", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: read},
		}, []string{`verbs [get], want get, list and watch`}},
		{"names or wildcards", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: read, ResourceNames: []string{"web"}},
			{APIGroups: []string{"apps"}, Resources: []string{"*"}, Verbs: read},
		}, []string{"resourceNames", "core/services (v1/Service) is not granted", "apps/* is granted",
			"apps/deployments (apps/v1/Deployment) is not granted"}},
	} {
		got := strings.Join(differences([]schema.GroupVersionKind{svc, dep}, c.rules), "\n")
		if (len(c.want) == 0) != (got == "") {
			t.Errorf("%s: differences %q, want %q", c.name, got, c.want)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: differences %q lack %q", c.name, got, w)
			}
		}
	}
}

// TestArgumentsFromRoleIsInstalled: config/default installs the role, bound to the controller's
// ServiceAccount in its namespace, next to the Deployment that passes the flag.
func TestArgumentsFromRoleIsInstalled(t *testing.T) {
	root := fluxenv.MustRepoRoot(t)
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, "config", "default"))
	if err != nil {
		t.Fatalf("kustomize build config/default: %v", err)
	}
	var role, binding, deployment bool
	for _, r := range res.Resources() {
		switch r.GetKind() {
		case "ClusterRole":
			role = role || r.GetName() == roleName
		case "ClusterRoleBinding":
			if r.GetName() != roleName {
				continue
			}
			b, _ := r.AsYAML()
			var crb rbacv1.ClusterRoleBinding
			if err := yaml.UnmarshalStrict(b, &crb); err != nil {
				t.Fatal(err)
			}
			want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kcl-artifact-controller", Namespace: "kcl-system"}}
			if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != roleName || !slices.Equal(crb.Subjects, want) {
				t.Errorf("ClusterRoleBinding %s: roleRef %+v, subjects %+v; want ClusterRole %s for %+v", roleName, crb.RoleRef, crb.Subjects, roleName, want)
			}
			binding = true
		case "Deployment":
			b, _ := r.AsYAML()
			deployment = strings.Contains(string(b), "--"+flagName+"=")
		}
	}
	if !role || !binding || !deployment {
		t.Errorf("config/default: ClusterRole %s %v, its binding %v, a Deployment passing --%s %v", roleName, role, binding, flagName, deployment)
	}
}

// deploymentKinds are the kinds of every --arguments-from-kinds of the manager container, as
// the controller parses them (a kind it refuses fails here too).
func deploymentKinds(t *testing.T, root string) []schema.GroupVersionKind {
	t.Helper()
	var d appsv1.Deployment
	readStrict(t, filepath.Join(root, deploymentFile), &d)
	var items []string
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "manager" {
			continue
		}
		for i, a := range c.Args {
			switch v, ok := strings.CutPrefix(a, "--"+flagName+"="); {
			case ok:
				items = append(items, strings.Split(v, ",")...)
			case a == "--"+flagName && i+1 < len(c.Args):
				items = append(items, strings.Split(c.Args[i+1], ",")...)
			}
		}
	}
	kinds, err := arguments.ParseKinds(items)
	if err != nil {
		t.Fatalf("%s: --%s: %v", deploymentFile, flagName, err)
	}
	return kinds.List()
}

// differences lists how rules differ from get, list and watch on exactly kinds, each kind's
// resource guessed from its kind as controller-gen and kubebuilder name them.
func differences(kinds []schema.GroupVersionKind, rules []rbacv1.PolicyRule) []string {
	want := map[string]string{}
	for _, gvk := range kinds {
		plural, _ := apimeta.UnsafeGuessKindToResource(gvk)
		want[groupResource(gvk.Group, plural.Resource)] = gvk.GroupVersion().String() + "/" + gvk.Kind
	}
	var out []string
	granted := map[string]bool{}
	for i, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			out = append(out, fmt.Sprintf("rule %d names resourceNames or nonResourceURLs: the controller lists and watches whole kinds", i))
			continue
		}
		verbs := slices.Sorted(slices.Values(r.Verbs))
		if !slices.Equal(verbs, []string{"get", "list", "watch"}) {
			out = append(out, fmt.Sprintf("rule %d: verbs %v, want get, list and watch", i, r.Verbs))
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				gr := groupResource(g, res)
				granted[gr] = true
				if _, ok := want[gr]; !ok {
					out = append(out, gr+" is granted, but no kind of the flag is it")
				}
			}
		}
	}
	for _, gr := range slices.Sorted(func(yield func(string) bool) {
		for gr := range want {
			if !yield(gr) {
				return
			}
		}
	}) {
		if !granted[gr] {
			out = append(out, fmt.Sprintf("%s (%s) is not granted", gr, want[gr]))
		}
	}
	return out
}

func groupResource(group, resource string) string {
	if group == "" {
		group = "core"
	}
	return group + "/" + resource
}

func readStrict(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
