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

// hookPhases maps the hook values that have a phase in a deploy here. Helm's install and upgrade
// hooks are one phase: every new artifact is an upgrade, and the first one an install.
var hookPhases = map[string]map[string]Phase{
	HelmHook: {"pre-install": Pre, "pre-upgrade": Pre, "post-install": Post, "post-upgrade": Post},
	ArgoHook: {"PreSync": Pre, "Sync": Main, "PostSync": Post},
}

// rollbackHooks map the hook values that have a phase in a rollback to the artifact. Argo CD's
// hooks run on every sync, a rollback included; Helm's run on the event they name.
var rollbackHooks = map[string]map[string]Phase{
	HelmHook: {"pre-rollback": Pre, "post-rollback": Post},
	ArgoHook: {"PreSync": Pre, "Sync": Main, "PostSync": Post},
}

// skippedHooks are hook values whose objects are not applied at all: they run on events a
// GitOps apply has no equivalent for (deletion, tests on demand, sync failure), and applying them
// with everything else would run, say, a pre-delete clean-up on every revision.
var skippedHooks = map[string]map[string]bool{
	HelmHook: {"pre-delete": true, "post-delete": true, "test": true, "test-success": true, "test-failure": true},
	ArgoHook: {"Skip": true, "SyncFail": true, "PreDelete": true, "PostDelete": true},
}

// Placement is where an object is applied: its phase when the artifact is deployed as a new one,
// and when it is published again by a rollback; "" where it is not applied.
type Placement struct {
	Deploy, Rollback Phase
}

// Skipped tells whether the object is applied neither in a deploy nor in a rollback.
func (p Placement) Skipped() bool { return p.Deploy == "" && p.Rollback == "" }

// Place returns the placement of an object with these annotations. This controller's own
// annotation wins over the hooks and places the object alike in a deploy and a rollback; a value
// it does not know is an error. Hook values that neither map nor skip are ignored (the object
// stays in main).
func Place(annotations map[string]string) (Placement, error) {
	if v, ok := annotations[Annotation]; ok {
		switch p := Phase(strings.TrimSpace(v)); p {
		case Pre, Main, Post:
			return Placement{p, p}, nil
		default:
			return Placement{}, fmt.Errorf("annotation %s: %q is not pre, main or post", Annotation, v)
		}
	}
	for _, key := range []string{HelmHook, ArgoHook} {
		if v, ok := annotations[key]; ok {
			if p, found := hook(key, v); found {
				return p, nil
			}
		}
	}
	return Placement{Main, Main}, nil
}

// Of returns the phase of an object in a deploy; skip is true for one a deploy does not apply.
func Of(annotations map[string]string) (phase Phase, skip bool, err error) {
	p, err := Place(annotations)
	return p.Deploy, err == nil && p.Deploy == "", err
}

// hook reads one hook annotation: the first value with a phase decides each of deploy and
// rollback; failing both, an annotation whose values are all known (skipped, or of the other
// event) is applied nowhere.
func hook(key, value string) (p Placement, found bool) {
	known, values := 0, 0
	for _, v := range strings.Split(value, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		values++
		if q, ok := hookPhases[key][v]; ok && p.Deploy == "" {
			p.Deploy = q
		}
		if q, ok := rollbackHooks[key][v]; ok && p.Rollback == "" {
			p.Rollback = q
		}
		if _, ok := hookPhases[key][v]; ok || skippedHooks[key][v] || rollbackHooks[key][v] != "" {
			known++
		}
	}
	if !p.Skipped() {
		return p, true
	}
	return p, values > 0 && known == values
}

// Phased tells whether objects counted per phase need more than the main phase: whether an
// artifact holds a directory per phase, applied by a Kustomization each.
func Phased(counts map[Phase]int) bool {
	return counts[Pre]+counts[Post]+counts[RollbackPre]+counts[RollbackPost] > 0
}

// The phases of a rollback that differ from a deploy's: an artifact whose objects are not placed
// alike in both holds them apart, applied instead of pre and post when it is rolled back to.
const (
	RollbackPre  Phase = "rollback/pre"
	RollbackPost Phase = "rollback/post"
)

// Generated are the phases a Kustomization may be generated for: every deploy phase and the
// rollback phases held apart.
var Generated = []Phase{Pre, Main, Post, RollbackPre, RollbackPost}

// Base is the deploy phase a rollback phase stands for.
func Base(p Phase) Phase {
	switch p {
	case RollbackPre:
		return Pre
	case RollbackPost:
		return Post
	}
	return p
}

// InRollback is the directory phase p is applied from in a rollback, for an artifact that holds
// its rollback phases apart.
func InRollback(p Phase) Phase {
	switch p {
	case Pre:
		return RollbackPre
	case Post:
		return RollbackPost
	}
	return p
}

// Dir is the directory of a phase inside an artifact that has more than one phase.
func Dir(p Phase) string { return string(p) }
