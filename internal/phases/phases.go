// Package phases sorts rendered objects into deploy phases: pre (applied and waited for before
// everything else), main, and post (applied once main is healthy). A program marks an object with
// the annotation kcl.contrib.fluxcd.io/phase; the hook annotations of Helm and Argo CD are read as
// synonyms, so that objects ported from a chart or an Argo CD application keep their hooks.
package phases

import (
	"fmt"
	"strings"
)

// Phase is a deploy phase.
type Phase string

const (
	Pre  Phase = "pre"
	Main Phase = "main"
	Post Phase = "post"
)

// All are the phases in the order they are applied.
var All = []Phase{Pre, Main, Post}

const (
	// Annotation marks an object's phase: pre, main or post.
	Annotation = "kcl.contrib.fluxcd.io/phase"
	// HelmHook is Helm's hook annotation (a comma-separated list).
	HelmHook = "helm.sh/hook"
	// ArgoHook is Argo CD's resource hook annotation (a comma-separated list).
	ArgoHook = "argocd.argoproj.io/hook"
	// RevisionAnnotation is set on the Pod template of the Jobs of the pre and post phases: it
	// changes with every artifact, so that a Job (whose template is immutable) is recreated, and
	// so runs again, for each new artifact and for nothing else.
	RevisionAnnotation = "kcl.contrib.fluxcd.io/revision"
)

// hookPhases maps the hook values that have a phase here. Helm's install and upgrade hooks are one
// phase: every new artifact is an upgrade, and the first one an install.
var hookPhases = map[string]map[string]Phase{
	HelmHook: {"pre-install": Pre, "pre-upgrade": Pre, "post-install": Post, "post-upgrade": Post},
	ArgoHook: {"PreSync": Pre, "Sync": Main, "PostSync": Post},
}

// skippedHooks are hook values whose objects are not applied at all: they run on events a
// GitOps apply has no equivalent for (deletion, rollback, tests on demand, sync failure), and
// applying them with everything else would run, say, a pre-delete clean-up on every revision.
var skippedHooks = map[string]map[string]bool{
	HelmHook: {"pre-delete": true, "post-delete": true, "pre-rollback": true, "post-rollback": true,
		"test": true, "test-success": true, "test-failure": true},
	ArgoHook: {"Skip": true, "SyncFail": true, "PreDelete": true, "PostDelete": true},
}

// Of returns the phase of an object with these annotations. skip is true for an object whose
// only hooks are ones this controller does not run (see skippedHooks); it is left out of the
// artifact. This controller's own annotation wins over the hooks; a value it does not know is an
// error, while hook values that neither map nor skip are ignored (the object stays in main).
func Of(annotations map[string]string) (phase Phase, skip bool, err error) {
	if v, ok := annotations[Annotation]; ok {
		switch p := Phase(strings.TrimSpace(v)); p {
		case Pre, Main, Post:
			return p, false, nil
		default:
			return "", false, fmt.Errorf("annotation %s: %q is not pre, main or post", Annotation, v)
		}
	}
	for _, key := range []string{HelmHook, ArgoHook} {
		v, ok := annotations[key]
		if !ok {
			continue
		}
		if p, skipped, found := hook(key, v); found {
			return p, skipped, nil
		}
	}
	return Main, false, nil
}

// hook reads one hook annotation: the first value with a phase decides; failing that, an
// annotation whose values are all skipped skips the object.
func hook(key, value string) (phase Phase, skip, found bool) {
	skipped, values := 0, 0
	for _, v := range strings.Split(value, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		values++
		if p, ok := hookPhases[key][v]; ok {
			return p, false, true
		}
		if skippedHooks[key][v] {
			skipped++
		}
	}
	if values > 0 && skipped == values {
		return "", true, true
	}
	return "", false, false
}

// Phased tells whether objects counted per phase need more than the main phase: whether an
// artifact holds a directory per phase, applied by a Kustomization each.
func Phased(counts map[Phase]int) bool { return counts[Pre]+counts[Post] > 0 }

// Dir is the directory of a phase inside an artifact that has more than one phase.
func Dir(p Phase) string { return string(p) }
