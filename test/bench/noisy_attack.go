package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// victimProgram is a victim's program: three ConfigMaps carrying its argument "value".
const victimProgram = `_name = option("name", type="str", required=True)
_value = option("value", type="str", required=True)

items = [{
    apiVersion = "v1"
    kind = "ConfigMap"
    metadata.name = "${_name}-${i}"
    data = {value = _value, index = str(i)}
} for i in range(3)]
`

// longProgram computes 10¹² iterations that keep nothing: its memory stays flat (a nested
// comprehension over fresh ranges grows until the worker's memory limit) and it runs until the
// render timeout kills it. "id" makes each object's inputs distinct, so that no two renders are
// one.
const longProgram = `_id = option("id", type="str", required=True)
_r = range(1000)
_spin = len([1 for a in _r for b in _r for c in _r for d in _r if a < 0])

items = [{apiVersion = "v1", kind = "ConfigMap", metadata.name = "spun-${_id}", data.n = str(_spin)}]
`

// bigProgram renders about 52 MB of YAML (59 ConfigMaps of 880 lines of 1 kB), under the
// default --kcl-max-output-size of 64 MiB. Its "seed" starts every line, so that each argument
// gives another output; the first ConfigMap carries it as "seed=<seed>;" for the check at the
// end.
const bigProgram = `_seed = option("seed", type="str", required=True)
_line = "${_seed};" + "x" * 1000
_blob = "\n".join([_line] * 880)

items = [{
    apiVersion = "v1"
    kind = "ConfigMap"
    metadata.name = "marker"
    data.seed = "seed=${_seed};"
}] + [{
    apiVersion = "v1"
    kind = "ConfigMap"
    metadata.name = "big-${i}"
    data.blob = _blob
} for i in range(59)]
`

// smallProgram is D's program, rendered in a few milliseconds.
const smallProgram = `_id = option("id", type="str", required=True)

items = [{apiVersion = "v1", kind = "ConfigMap", metadata.name = "small-${_id}", data.id = _id}]
`

const slowDeps = 4

// attackFiles is the attacker's repository: A's packages, each with a kcl.mod dependency of
// its own on the drip server (a shared one could be fetched once for all), and B's, C's and D's
// programs.
func attackFiles(dripHost string) map[string]string {
	files := map[string]string{"long/main.k": longProgram, "big/main.k": bigProgram, "small/main.k": smallProgram}
	for i := range slowDeps {
		dir := fmt.Sprintf("slow/a%d/", i)
		files[dir+"kcl.mod"] = fmt.Sprintf("[package]\nname = \"a%d\"\nedition = \"v0.11.0\"\nversion = \"0.1.0\"\n\n"+
			"[dependencies]\nk8s = { oci = \"oci://%s/noisy-a%d/k8s\", tag = \"1.31.2\" }\n", i, dripHost, i)
		files[dir+"main.k"] = "import k8s.api.core.v1 as core\n\n[core.ConfigMap {metadata.name = \"never\"}]\n"
	}
	return files
}

// attackGroups are the four attacks of issue 33, all in the attacker's namespace, all with the
// longest spec.timeout.
func (n *noisyRun) attackGroups() []attackGroup {
	spec := func(s *kclv1.KCLArtifactSpec, path string, interval, retry time.Duration, args map[string]string) {
		s.Path, s.Arguments = path, args
		s.Interval = metav1.Duration{Duration: interval}
		s.RetryInterval = &metav1.Duration{Duration: retry}
	}
	return []attackGroup{
		{id: "A", title: "slow dependencies (a byte every 5 s)", n: slowDeps, spec: func(i int, s *kclv1.KCLArtifactSpec) {
			spec(s, fmt.Sprintf("slow/a%d", i), time.Hour, 5*time.Second, nil)
		}},
		{id: "B", title: "renders until the render timeout", n: 6, spec: func(i int, s *kclv1.KCLArtifactSpec) {
			spec(s, "long", time.Hour, 5*time.Second, map[string]string{"id": fmt.Sprintf("b%d", i)})
		}},
		{id: "C", title: "52 MB outputs, argument changed every 10 s", n: 4, spec: func(i int, s *kclv1.KCLArtifactSpec) {
			spec(s, "big", bigChangeEvery, 5*time.Second, map[string]string{"seed": seedOf(objectName("C", i), 1)})
		}},
		{id: "D", title: "small program at interval 1ms", n: 20, spec: func(i int, s *kclv1.KCLArtifactSpec) {
			spec(s, "small", time.Millisecond, time.Millisecond, map[string]string{"id": fmt.Sprintf("d%d", i)})
		}},
	}
}

func objectName(group string, i int) string { return fmt.Sprintf("%s-%02d", strings.ToLower(group), i) }

func seedOf(name string, version int) string { return fmt.Sprintf("%s-v%d", name, version) }

// createAttack creates the attacker's objects, all at once.
func (n *noisyRun) createAttack() error {
	b := n.b
	var objs []*kclv1.KCLArtifact
	for _, g := range n.groups {
		for i := range g.n {
			o := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: objectName(g.id, i), Namespace: n.cur.namespaceOf(i),
				Labels: map[string]string{noisyRoleLabel: g.role()}}}
			// one source for every attacker namespace: the attack is the same, only spread
			o.Spec.SourceRef = kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: sourceName, Namespace: attackNS}
			o.Spec.Timeout = &metav1.Duration{Duration: attackTimeout}
			o.Spec.Kustomization = &kclv1.KustomizationTemplate{Disabled: true}
			g.spec(i, &o.Spec)
			if seed, ok := o.Spec.Arguments["seed"]; ok {
				n.seeds[types.NamespacedName{Namespace: o.Namespace, Name: o.Name}] = seed
			}
			objs = append(objs, o)
		}
	}
	for _, ns := range n.cur.namespaces {
		if ns == attackNS {
			continue
		}
		if err := b.c.Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	logf("   attacker over %d namespaces (%s): %s", n.cur.spread, strings.Join(n.cur.namespaces, ", "), n.groupsString())
	n.cur.attackStarted = time.Now()
	// C first: a namespace's requests are served in their order, and an attacker after the
	// controller's memory puts its large outputs at the head of its queue
	big := slices.DeleteFunc(slices.Clone(objs), func(o *kclv1.KCLArtifact) bool { return o.Labels[noisyRoleLabel] != n.group("C").role() })
	rest := slices.DeleteFunc(objs, func(o *kclv1.KCLArtifact) bool { return o.Labels[noisyRoleLabel] == n.group("C").role() })
	create := func(o *kclv1.KCLArtifact) error {
		if err := b.c.Create(b.ctx, o); err != nil {
			return fmt.Errorf("creating %s/%s: %w", o.Namespace, o.Name, err)
		}
		return nil
	}
	var err error
	for _, o := range big {
		if err = create(o); err != nil {
			return err
		}
	}
	err = b.parallel(len(rest), func(i int) error { return create(rest[i]) })
	objs = append(big, rest...)
	if err == nil {
		logf("   created %d attacker objects in %s", len(objs), fmtDur(time.Since(n.cur.attackStarted)))
	}
	return err
}

func (n *noisyRun) groupsString() string {
	var parts []string
	for _, g := range n.groups {
		parts = append(parts, fmt.Sprintf("%s %d × %s", g.id, g.n, g.title))
	}
	return strings.Join(parts, "; ")
}

// changeBig changes every C object's argument each bigChangeEvery until stop, so that C keeps
// rendering 52 MB while the victims are measured. A change in flight when stop comes is
// finished: the seeds recorded are the latest ones the API server holds.
func (n *noisyRun) changeBig(stop <-chan struct{}) {
	b := n.b
	t := time.NewTicker(bigChangeEvery)
	defer t.Stop()
	for version := 2; ; version++ {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for i := range n.group("C").n {
			key := types.NamespacedName{Namespace: n.cur.namespaceOf(i), Name: objectName("C", i)}
			seed := seedOf(key.Name, version)
			patch := fmt.Sprintf(`{"spec":{"arguments":{"seed":%q}}}`, seed)
			obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
			if err := b.c.Patch(b.ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
				if b.ctx.Err() == nil {
					logf("   WARNING: changing %s: %v", key, err)
				}
				continue
			}
			n.mu.Lock()
			n.seeds[key], n.cur.changes = seed, n.cur.changes+1
			n.mu.Unlock()
		}
	}
}

func (n *noisyRun) group(id string) attackGroup {
	for _, g := range n.groups {
		if g.id == id {
			return g
		}
	}
	panic("no attack group " + id)
}

// warmUp lets the attacker run noisyWarmup from its creation, and at least until the watch
// shows all its objects, one of C's has published and one of A's and one of B's has failed; it
// logs what the controller made of them
// by then.
func (n *noisyRun) warmUp() error {
	b := n.b
	until := n.cur.attackStarted.Add(noisyWarmup)
	var last string
	_, err := b.poll("attacker warm-up", time.Second, noisyWarmupMax, func(ctx context.Context) (bool, string, error) {
		var parts []string
		seen, bigPublished := true, false
		failedOnce := map[string]bool{}
		for _, g := range n.groups {
			list, err := n.list(ctx, g.role())
			if err != nil {
				return false, "", err
			}
			states := map[string]int{}
			for i := range list {
				states[readyState(&list[i])]++
				bigPublished = bigPublished || (g.id == "C" && list[i].Status.Artifact != nil)
				failedOnce[g.id] = failedOnce[g.id] || apimeta.IsStatusConditionFalse(list[i].Status.Conditions, meta.ReadyCondition)
			}
			seen = seen && len(list) == g.n
			parts = append(parts, fmt.Sprintf("%s: %s", g.id, countsString(states)))
		}
		last = strings.Join(parts, "; ")
		return seen && bigPublished && failedOnce["A"] && failedOnce["B"] && time.Now().After(until), last, nil
	})
	logf("   attacker after its warm-up of %s: %s", fmtDur(time.Since(n.cur.attackStarted)), last)
	return err
}

// bigCheck is what became of one C object: its latest argument and what it published.
type bigCheck struct {
	name, latest, published, ready string
	hasArtifact                    bool
	bytes                          int64
	problem                        string // the artifact could not be read or verified
}

func (c bigCheck) ok() bool { return c.hasArtifact && c.problem == "" && c.published == c.latest }

// convergeBig waits, bounded, until every C object is Ready at its latest generation, then reads
// each one's artifact: the one of its latest argument, complete, or not.
func (n *noisyRun) convergeBig() error {
	b := n.b
	n.mu.Lock()
	logf("-- noisy / C converges: %d argument changes made; waiting at most %s for C to publish the latest",
		n.cur.changes, fmtDur(n.convergeBound()))
	n.mu.Unlock()
	began := time.Now()
	deadline := began.Add(n.convergeBound())
	converged := false
	_, err := b.poll("C at its latest argument", time.Second, n.convergeBound()+time.Minute,
		func(ctx context.Context) (bool, string, error) {
			list, err := n.list(ctx, n.group("C").role())
			if err != nil {
				return false, "", err
			}
			done := 0
			states := map[string]int{}
			for i := range list {
				o := &list[i]
				if isReady(o) && o.Status.ObservedGeneration == o.Generation && o.Status.Artifact != nil {
					done++
					continue
				}
				states[readyState(o)]++
			}
			converged = done == n.group("C").n
			return converged || time.Now().After(deadline), fmt.Sprintf("%d/%d at their latest generation; others: %s",
				done, n.group("C").n, countsString(states)), nil
		})
	if err != nil {
		return err
	}
	n.cur.converged = -1
	if converged {
		n.cur.converged = time.Since(began)
	}
	for i := range n.group("C").n {
		c, err := n.checkBig(types.NamespacedName{Namespace: n.cur.namespaceOf(i), Name: objectName("C", i)})
		if err != nil {
			return err
		}
		n.cur.bigChecks = append(n.cur.bigChecks, c)
		logf("   %s: latest %s, published %s (%.1f MB), %s%s", c.name, c.latest, orNone(c.published), float64(c.bytes)/1e6,
			c.ready, prefixed("; ", c.problem))
	}
	return nil
}

func (n *noisyRun) checkBig(key types.NamespacedName) (bigCheck, error) {
	b := n.b
	name := key.Name
	var o kclv1.KCLArtifact
	if err := b.c.Get(b.ctx, key, &o); err != nil {
		return bigCheck{}, err
	}
	n.mu.Lock()
	c := bigCheck{name: name, latest: n.seeds[key], ready: readyState(&o)}
	n.mu.Unlock()
	if o.Status.Artifact == nil {
		return c, nil
	}
	c.hasArtifact = true
	var err error
	if c.published, c.bytes, err = readBigArtifact(b.ctx, o.Status.Artifact); err != nil {
		c.problem = err.Error()
	}
	return c, nil
}

// readBigArtifact downloads a C artifact, checks its digest and returns the seed its marker
// carries and the size of the YAML it holds.
func readBigArtifact(ctx context.Context, a *meta.Artifact) (seed string, size int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("GET %s: %s", a.URL, resp.Status)
	}
	h := sha256.New()
	body := io.TeeReader(resp.Body, h)
	gz, err := gzip.NewReader(body)
	if err != nil {
		return "", 0, err
	}
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", 0, err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return "", 0, err
		}
		size += int64(len(data))
		if seed == "" {
			seed = markerSeed(data)
		}
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return "", 0, err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != a.Digest {
		return seed, size, fmt.Errorf("digest %s, status says %s", got, a.Digest)
	}
	return seed, size, nil
}

// markerSeed finds "seed=<seed>;" in the YAML of bigProgram.
func markerSeed(yaml []byte) string {
	_, rest, ok := bytes.Cut(yaml, []byte("seed="))
	if !ok {
		return ""
	}
	seed, _, _ := bytes.Cut(rest, []byte(";"))
	return string(seed)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// groupState is the state of one attack group at the end.
type groupState struct {
	states    map[string]int
	published int
	example   string // a failure's message
}

// attackOutcome reads every attacker object from the API server, at the end.
func (n *noisyRun) attackOutcome() error {
	b := n.b
	n.cur.final = map[string]groupState{}
	for _, g := range n.groups {
		var list kclv1.KCLArtifactList
		if err := b.c.List(b.ctx, &list, client.MatchingLabels{noisyRoleLabel: g.role()}); err != nil {
			return err
		}
		s := groupState{states: map[string]int{}}
		for i := range list.Items {
			o := &list.Items[i]
			s.states[readyState(o)]++
			if o.Status.Artifact != nil && o.Status.Artifact.Digest != "" {
				s.published++
			}
			c := apimeta.FindStatusCondition(o.Status.Conditions, meta.ReadyCondition)
			if c != nil && c.Status == metav1.ConditionFalse && s.example == "" {
				s.example = firstLine(c.Message)
			}
		}
		n.cur.final[g.id] = s
		logf("   %s at the end: %s; %d/%d published an artifact%s", g.id, countsString(s.states), s.published, g.n,
			prefixed("; e.g. ", s.example))
	}
	return nil
}

// dripServer is the attacker's dependency server on 127.0.0.1: it answers every request with
// one byte every dripEvery, for ever (kclmodtest.Drip's behaviour; kclmodtest needs a
// testing.TB).
type dripServer struct {
	host     string
	srv      *http.Server
	stop     chan struct{}
	requests atomic.Int64
	written  atomic.Int64
}

const dripEvery = 5 * time.Second

func startDripServer() (*dripServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &dripServer{host: ln.Addr().String(), stop: make(chan struct{})}
	d.srv = &http.Server{Handler: http.HandlerFunc(d.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = d.srv.Serve(ln) }()
	return d, nil
}

func (d *dripServer) serve(rw http.ResponseWriter, r *http.Request) {
	d.requests.Add(1)
	flusher, _ := rw.(http.Flusher)
	t := time.NewTicker(dripEvery)
	defer t.Stop()
	for {
		// a space: valid in a JSON body, which the client goes on waiting for
		if _, err := rw.Write([]byte{' '}); err != nil {
			return
		}
		d.written.Add(1)
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-d.stop:
			return
		case <-t.C:
		}
	}
}

// close ends the drips and the server.
func (d *dripServer) close() {
	close(d.stop)
	_ = d.srv.Close()
}

// convergeBound is how long C may take to publish its latest argument at the end of an attack.
func (n *noisyRun) convergeBound() time.Duration {
	if n.b.cfg.converge > 0 {
		return n.b.cfg.converge
	}
	return min(n.b.cfg.timeout, noisyConverge)
}
