package fluxkcl

import (
	"context"
	"fmt"
	"slices"
	"strings"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// stageNode is a KCLArtifact in a chain of stages, with the stages that follow it; the JSON and
// YAML of tree --stages.
type stageNode struct {
	Namespace      string             `json:"namespace"`
	Name           string             `json:"name"`
	Upstream       string             `json:"upstream,omitempty"`
	Revision       string             `json:"revision,omitempty"`
	SourceRevision string             `json:"sourceRevision,omitempty"`
	Inputs         []kclv1.InputValue `json:"inputs,omitempty"`
	Health         string             `json:"health,omitempty"`
	Gate           string             `json:"gate,omitempty"`
	// Cycle marks a stage reached from no KCLArtifact that follows none: its upstreams form a cycle.
	Cycle   bool          `json:"cycle,omitempty"`
	Waiting []waitingNode `json:"waiting,omitempty"`
	Stages  []stageNode   `json:"stages,omitempty"`
}

// waitingNode is an artifact a stage rendered ahead and waits to publish.
type waitingNode struct {
	Digest         string             `json:"digest"`
	SourceRevision string             `json:"sourceRevision,omitempty"`
	Inputs         []kclv1.InputValue `json:"inputs,omitempty"`
	WaitsFor       string             `json:"waitsFor,omitempty"`
}

func (a *app) printStages(ctx context.Context, args []string, output string) error {
	items, _, err := a.listArtifacts(ctx, nil)
	if err != nil {
		return err
	}
	roots, err := stageTrees(items, *a.kube.Namespace, a.namespace(), args)
	if err != nil {
		return err
	}
	if output != "" {
		return a.printData(output, roots)
	}
	for _, r := range roots {
		printTree(a.stdout, r.tree())
	}
	return nil
}

// chains indexes KCLArtifacts by namespace/name and the stages that follow each.
type chains struct {
	byKey     map[string]*kclv1.KCLArtifact
	followers map[string][]*kclv1.KCLArtifact
}

func key(ns, name string) string { return ns + "/" + name }

// upstreamKey is the upstream a stage follows, "" for none; an upstream in another namespace is
// kept as named (the controller refuses it, and it is listed as not found here).
func upstreamKey(obj *kclv1.KCLArtifact) string {
	p := obj.Spec.Promotion
	if p == nil {
		return ""
	}
	ns := p.From.Namespace
	if ns == "" {
		ns = obj.Namespace
	}
	return key(ns, p.From.Name)
}

func indexChains(items []kclv1.KCLArtifact) chains {
	c := chains{byKey: map[string]*kclv1.KCLArtifact{}, followers: map[string][]*kclv1.KCLArtifact{}}
	for i := range items {
		it := &items[i]
		c.byKey[key(it.Namespace, it.Name)] = it
		if up := upstreamKey(it); up != "" {
			c.followers[up] = append(c.followers[up], it)
		}
	}
	return c
}

// inChain tells whether obj follows an upstream or is followed.
func (c chains) inChain(obj *kclv1.KCLArtifact) bool {
	return obj.Spec.Promotion != nil || len(c.followers[key(obj.Namespace, obj.Name)]) > 0
}

// isRoot tells whether obj starts a chain: it follows nothing listed.
func (c chains) isRoot(obj *kclv1.KCLArtifact) bool {
	up := upstreamKey(obj)
	return up == "" || c.byKey[up] == nil
}

// stageTrees are the chains of items (listed in listNS, "" for all), or only the one holding
// args[0] of namespace ns. Stages in a cycle, which no root reaches, are listed too, marked.
func stageTrees(items []kclv1.KCLArtifact, ns, listNS string, args []string) ([]stageNode, error) {
	c := indexChains(items)
	seen := map[string]bool{}
	var roots []stageNode
	add := func(obj *kclv1.KCLArtifact, cycle bool) {
		if !seen[key(obj.Namespace, obj.Name)] {
			n := c.walk(obj, seen)
			n.Cycle = cycle
			roots = append(roots, n)
		}
	}
	if len(args) > 0 {
		obj := c.byKey[key(ns, args[0])]
		if obj == nil || !c.inChain(obj) {
			return nil, fmt.Errorf("KCLArtifact %s is in no chain of stages: it has no spec.promotion and no stage follows it", args[0])
		}
		root, cycle := c.rootOf(obj)
		add(root, cycle)
		return roots, nil
	}
	for i := range items {
		if c.inChain(&items[i]) && c.isRoot(&items[i]) {
			add(&items[i], false)
		}
	}
	for i := range items {
		if c.inChain(&items[i]) {
			add(&items[i], true)
		}
	}
	if len(roots) == 0 {
		return nil, fmt.Errorf("no KCLArtifact follows another (spec.promotion) in %s namespace", namespaceText(listNS))
	}
	return roots, nil
}

// rootOf follows obj's upstreams to the KCLArtifact that starts its chain; in a cycle, obj itself.
func (c chains) rootOf(obj *kclv1.KCLArtifact) (*kclv1.KCLArtifact, bool) {
	visited := map[string]bool{}
	for cur := obj; ; {
		visited[key(cur.Namespace, cur.Name)] = true
		if c.isRoot(cur) {
			return cur, false
		}
		up := c.byKey[upstreamKey(cur)]
		if visited[key(up.Namespace, up.Name)] {
			return obj, true
		}
		cur = up
	}
}

// walk is obj's node and those of the stages following it, each once.
func (c chains) walk(obj *kclv1.KCLArtifact, seen map[string]bool) stageNode {
	seen[key(obj.Namespace, obj.Name)] = true
	n := stageNodeOf(obj)
	followers := slices.Clone(c.followers[key(obj.Namespace, obj.Name)])
	slices.SortFunc(followers, func(x, y *kclv1.KCLArtifact) int { return strings.Compare(x.Name, y.Name) })
	for _, f := range followers {
		if !seen[key(f.Namespace, f.Name)] {
			n.Stages = append(n.Stages, c.walk(f, seen))
		}
	}
	return n
}

func stageNodeOf(obj *kclv1.KCLArtifact) stageNode {
	n := stageNode{Namespace: obj.Namespace, Name: obj.Name}
	if obj.Spec.Promotion != nil {
		n.Upstream, n.Gate = upstreamName(obj), gateState(obj)
	}
	if e, ok := currentEntry(obj); ok {
		n.Revision, n.SourceRevision, n.Inputs, n.Health = e.Revision, e.SourceRevision, e.Inputs, e.Health
	}
	if p := obj.Status.Promotion; p != nil {
		for _, w := range p.Waiting {
			n.Waiting = append(n.Waiting, waitingNode{Digest: w.Digest, SourceRevision: w.SourceRevision,
				Inputs: w.Inputs, WaitsFor: closedGates(obj, w.Gates, "")})
		}
	}
	return n
}

// tree draws the stage as a line of flux tree: what it runs, its health and gate, then the
// artifacts waiting and the stages following it.
func (n stageNode) tree() treeNode {
	line := objectText(kclv1.KCLArtifactKind, n.Namespace, n.Name)
	if n.SourceRevision != "" || n.Revision != "" {
		line += " runs " + runsText(n.SourceRevision, n.Inputs)
	} else {
		line += " runs nothing yet"
	}
	if n.Health != "" {
		line += ", " + n.Health
	}
	if n.Gate != "" {
		line += ", gate " + n.Gate
	}
	if n.Cycle {
		line += " (its upstreams form a cycle)"
	}
	t := treeNode{Resource: line}
	for _, w := range n.Waiting {
		wl := "waiting " + truncateHex(w.Digest) + " " + runsText(w.SourceRevision, w.Inputs)
		if w.WaitsFor != "" {
			wl += ": " + w.WaitsFor
		}
		t.Resources = append(t.Resources, treeNode{Resource: wl})
	}
	for _, s := range n.Stages {
		t.Resources = append(t.Resources, s.tree())
	}
	return t
}

// runsText is "main@sha1:12345678 (web.tag=1.4.3, replicas=2)".
func runsText(sourceRevision string, inputs []kclv1.InputValue) string {
	s := truncateHex(orDash(sourceRevision))
	if in := inputsText(inputs, maxStageInputs); in != "" {
		s += " (" + in + ")"
	}
	return s
}
