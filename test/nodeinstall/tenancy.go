package nodeinstall

import (
	"fmt"
	"strings"
)

// Multi-tenancy lockdown as Flux documents it (fluxcd/flux2-multi-tenancy, "Multi-tenancy
// lockdown" of Flux's installation docs): kustomize-controller refuses cross-namespace
// references and applies every Kustomization that names no service account as the `default`
// account of the Kustomization's namespace, which a tenant namespace grants nothing; the platform's
// own flux-system Kustomization keeps its rights by naming kustomize-controller's account.

// KustomizeControllerLockdownPatches are the entries of the `patches:` list of flux bootstrap's
// clusters/<cluster>/flux-system/kustomization.yaml that lock kustomize-controller down. The
// flux-system Kustomization (gotk-sync.yaml) is patched to run as kustomize-controller, since with
// --default-service-account it would otherwise apply the platform as flux-system's `default`
// account; a target that matches nothing (no gotk-sync.yaml) is no error for kustomize.
const KustomizeControllerLockdownPatches = `  - patch: |
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --no-cross-namespace-refs=true
    target:
      kind: Deployment
      name: kustomize-controller
  - patch: |
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --default-service-account=default
    target:
      kind: Deployment
      name: kustomize-controller
  - patch: |
      - op: add
        path: /spec/serviceAccountName
        value: kustomize-controller
    target:
      kind: Kustomization
      name: flux-system
`

// LockDownBootstrapKustomization adds KustomizeControllerLockdownPatches to a flux bootstrap
// kustomization.yaml (READMEBootstrapKustomization's), at the end of its `patches:` list.
func LockDownBootstrapKustomization(kustomization string) (string, error) {
	lines := strings.Split(strings.TrimRight(kustomization, "\n"), "\n")
	at := -1
	for i, l := range lines {
		if l == "patches:" {
			at = i
		}
	}
	if at < 0 {
		return "", fmt.Errorf("the bootstrap kustomization has no top-level patches: list")
	}
	end := at + 1
	for end < len(lines) && (strings.HasPrefix(lines[end], " ") || strings.TrimSpace(lines[end]) == "") {
		end++
	}
	patched := append(append([]string{}, lines[:end]...), strings.Split(strings.TrimRight(KustomizeControllerLockdownPatches, "\n"), "\n")...)
	return strings.Join(append(patched, lines[end:]...), "\n") + "\n", nil
}

// ControllerLockdownPatch is the entry of a kustomize `patches:` list that keeps this controller's
// KCLArtifacts to sources of their own namespace (--no-cross-namespace-refs), for an overlay of
// config/default.
const ControllerLockdownPatch = `  - patch: |
      - op: add
        path: /spec/template/spec/containers/0/args/-
        value: --no-cross-namespace-refs=true
    target:
      kind: Deployment
      name: kcl-artifact-controller
`

// TenantAccount is the name of a tenant's ServiceAccount, which its Kustomizations (and the
// KCLArtifacts' kustomization.serviceAccountName) name: the tenant's own name, as
// `flux create tenant` names it.
func TenantAccount(tenant string) string { return tenant }

// TenantYAML is what flux2-multi-tenancy's tenants/ hold for a tenant (`flux create tenant
// <tenant> --with-namespace=<tenant>`): its namespace, a ServiceAccount, and a RoleBinding of
// cluster-admin to it in that namespace only (a RoleBinding grants a ClusterRole's rules in its
// own namespace, never cluster-scoped ones). The namespace's `default` account is granted nothing:
// a Kustomization that names no account is refused everything.
func TenantYAML(tenant string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
  labels:
    toolkit.fluxcd.io/tenant: %[1]s
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: %[2]s
  namespace: %[1]s
  labels:
    toolkit.fluxcd.io/tenant: %[1]s
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: gotk-reconciler
  namespace: %[1]s
  labels:
    toolkit.fluxcd.io/tenant: %[1]s
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: cluster-admin
subjects:
  - kind: ServiceAccount
    name: %[2]s
    namespace: %[1]s
`, tenant, TenantAccount(tenant))
}
