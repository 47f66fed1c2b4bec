package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// phasesProgram has one ConfigMap per deploy phase, each carrying the program's version.
const phasesProgram = `_v = "%s"
_ns = option("namespace")
_cm = lambda name: str, phase: str {
    {
        apiVersion = "v1", kind = "ConfigMap"
        metadata = {name = name, namespace = _ns, annotations = {"kcl.contrib.fluxcd.io/phase" = phase}}
        data.version = _v
    }
}
[_cm("pre", "pre"), _cm("main", "main"), _cm("post", "post")]
`

// TestPhasesFollowEachOther: with the real kustomize-controller (which polls a dependsOn every
// 30 s), each phase starts the moment the one before it is Ready at the artifact's revision,
// never before: over three artifacts, the API server's own ordering (resourceVersions) puts every
// phase's first object after its predecessor's Kustomization turned Ready at that revision.
func TestPhasesFollowEachOther(t *testing.T) {
	ns := newNamespace(t, "phases")
	rev := gitRevision(createRepo(t, ns, map[string]string{"main.k": fmt.Sprintf(phasesProgram, "1")}))
	createGitRepository(t, ns, "app", ns)
	asked := map[string]string{}
	for run := 1; run <= 3; run++ {
		version := strconv.Itoa(run)
		w := watchPhases(t, ns)
		if run == 1 {
			create(t, newKCLArtifact(ns, "app", "app", nil))
		} else {
			rev = commit(t, ns, "v"+version, map[string]string{"main.k": fmt.Sprintf(phasesProgram, version)})
		}
		obj := waitKCLArtifactReady(t, ns, "app", rev)
		artifact := obj.Status.Artifact.Revision
		seen := w.until(t, func(s phaseWatch) bool { return s.configMap["post"].version == version })
		pre, main, post := seen.configMap["pre"], seen.configMap["main"], seen.configMap["post"]
		if pre.version != version || main.version != version {
			t.Fatalf("run %d: not every phase applied version %s: %+v", run, version, seen.configMap)
		}
		for _, step := range []struct {
			before, after string
			at            watched
		}{{"app-pre", "main", main}, {"app", "post", post}} {
			ready, ok := seen.readyAt[step.before+"@"+artifact]
			switch {
			case !ok:
				t.Errorf("run %d: %s applied, but %s was never seen Ready at %s", run, step.after, step.before, artifact)
			case step.at.rv <= ready.rv:
				t.Errorf("run %d: %s applied (resourceVersion %d) before %s was Ready at %s (resourceVersion %d)",
					run, step.after, step.at.rv, step.before, artifact, ready.rv)
			}
		}
		// each later phase was asked for (its 30 s poll would not change the annotation)
		for _, name := range []string{"app", "app-post"} {
			var at string
			waitFor(t, ns, "Kustomization "+name+" to handle a request of this run", func(ctx context.Context) (bool, string, error) {
				ks := &kustomizev1.Kustomization{}
				if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ks); err != nil {
					return false, "", err
				}
				at = ks.GetAnnotations()[meta.ReconcileRequestAnnotation]
				state := fmt.Sprintf("requested %q (before: %q), handled %q", at, asked[name], ks.Status.LastHandledReconcileAt)
				return at != "" && at != asked[name] && ks.Status.LastHandledReconcileAt == at, state, nil
			})
			asked[name] = at
		}
		t.Logf("figure: run %d: pre applied -> post applied %s (pre -> main %s, main -> post %s)", run,
			post.at.Sub(pre.at).Round(10*time.Millisecond), main.at.Sub(pre.at).Round(10*time.Millisecond),
			post.at.Sub(main.at).Round(10*time.Millisecond))
	}
}

// watched is one write seen by a watch: its resourceVersion (the API server's order of writes),
// when the test saw it, and the ConfigMap's version.
type watched struct {
	rv      uint64
	at      time.Time
	version string
}

// phaseWatch is what the watches saw: each phase ConfigMap's first write of its latest version,
// and the first write of each Kustomization Ready at a revision ("<name>@<revision>").
type phaseWatch struct {
	configMap map[string]watched
	readyAt   map[string]watched
}

type phaseWatcher struct {
	ctx    context.Context
	cms    watch.Interface
	kss    watch.Interface
	seen   phaseWatch
	cancel context.CancelFunc
}

// watchPhases starts watching the namespace's ConfigMaps and Kustomizations from now on.
func watchPhases(t *testing.T, ns string) *phaseWatcher {
	t.Helper()
	c, err := client.NewWithWatch(suite.env.Config, client.Options{Scheme: suite.env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	w := &phaseWatcher{ctx: ctx, cancel: cancel, seen: phaseWatch{configMap: map[string]watched{}, readyAt: map[string]watched{}}}
	t.Cleanup(cancel)
	if w.cms, err = c.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if w.kss, err = c.Watch(ctx, &kustomizev1.KustomizationList{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.cms.Stop(); w.kss.Stop() })
	return w
}

// until reads both watches until done holds for what was seen.
func (w *phaseWatcher) until(t *testing.T, done func(phaseWatch) bool) phaseWatch {
	t.Helper()
	for !done(w.seen) {
		select {
		case ev := <-w.cms.ResultChan():
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && w.seen.configMap[cm.Name].version != cm.Data["version"] {
				w.seen.configMap[cm.Name] = watched{rv: resourceVersion(t, cm), at: time.Now(), version: cm.Data["version"]}
			}
		case ev := <-w.kss.ResultChan():
			ks, ok := ev.Object.(*kustomizev1.Kustomization)
			if !ok || !apimeta.IsStatusConditionTrue(ks.Status.Conditions, meta.ReadyCondition) {
				continue
			}
			key := ks.Name + "@" + ks.Status.LastAppliedRevision
			if _, seen := w.seen.readyAt[key]; !seen {
				w.seen.readyAt[key] = watched{rv: resourceVersion(t, ks), at: time.Now()}
			}
		case <-w.ctx.Done():
			t.Fatalf("watching the phases: %v; seen %+v", w.ctx.Err(), w.seen)
		}
	}
	return w.seen
}

func resourceVersion(t *testing.T, o client.Object) uint64 {
	t.Helper()
	rv, err := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion of %s: %v", o.GetName(), err)
	}
	return rv
}
