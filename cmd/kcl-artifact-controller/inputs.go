package main

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
)

// inputKinds parses --arguments-from-kinds and checks that the API server serves each kind (a
// watch of a kind it does not serve would keep the controller from starting, without saying
// why), and tells whether it serves ImagePolicies.
func inputKinds(mgr ctrl.Manager, flag []string) (kinds *arguments.Kinds, noImagePolicies bool, err error) {
	kinds, err = arguments.ParseKinds(flag)
	if err != nil {
		return nil, false, fmt.Errorf("--arguments-from-kinds: %w", err)
	}
	mapper := mgr.GetRESTMapper()
	for _, gvk := range kinds.List() {
		if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return nil, false, fmt.Errorf("--arguments-from-kinds: the API server does not serve %s: %w", gvk, err)
		}
	}
	served, err := arguments.ImagePoliciesServed(mapper)
	if err != nil {
		return nil, false, fmt.Errorf("looking up ImagePolicies: %w", err)
	}
	return kinds, !served, nil
}
