package ui

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// validName tells whether ns and name can be a KCLArtifact's: DNS labels and subdomain names
// hold no "/" or "..", so no path built from them leaves its directory.
func validName(ns, name string) bool {
	return len(validation.IsDNS1123Label(ns)) == 0 && len(validation.IsDNS1123Subdomain(name)) == 0
}

func pageLink(ns, name string) string { return "/kclartifact/" + ns + "/" + name + "/" }

// serveIndex lists the KCLArtifacts whose artifacts this instance serves.
func (h *handler) serveIndex(w http.ResponseWriter, r *http.Request) {
	var list kclv1.KCLArtifactList
	if err := h.reader.List(r.Context(), &list); err != nil {
		h.log.Error(err, "listing KCLArtifacts")
		h.errorPage(w, http.StatusInternalServerError, "Cannot list KCLArtifacts", err.Error())
		return
	}
	now := time.Now()
	var rows []summary
	for i := range list.Items {
		if _, ok := h.dirOf(&list.Items[i]); ok {
			rows = append(rows, summarize(&list.Items[i], now))
		}
	}
	slices.SortFunc(rows, func(a, b summary) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	h.render(w, http.StatusOK, "index", indexPage{pageBase: h.base("KCLArtifacts"), Rows: rows, Total: len(list.Items)})
}

func (h *handler) redirectToPage(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	if !validName(ns, name) {
		h.notServed(w, ns, name)
		return
	}
	http.Redirect(w, r, pageLink(ns, name), http.StatusMovedPermanently)
}

// lookup finds the KCLArtifact of the request, answering 404 when this instance does not serve
// it.
func (h *handler) lookup(w http.ResponseWriter, r *http.Request) (*kclv1.KCLArtifact, bool) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	if !validName(ns, name) {
		h.notServed(w, ns, name)
		return nil, false
	}
	obj := &kclv1.KCLArtifact{}
	err := h.reader.Get(r.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		h.notServed(w, ns, name)
		return nil, false
	}
	if err != nil {
		h.log.Error(err, "reading a KCLArtifact", "kclartifact", ns+"/"+name)
		h.errorPage(w, http.StatusInternalServerError, "Cannot read KCLArtifact "+ns+"/"+name, err.Error())
		return nil, false
	}
	if _, ok := h.dirOf(obj); !ok {
		h.notServed(w, ns, name)
		return nil, false
	}
	return obj, true
}

func (h *handler) notServed(w http.ResponseWriter, ns, name string) {
	h.errorPage(w, http.StatusNotFound, "Not found",
		fmt.Sprintf("This instance serves no artifacts of a KCLArtifact %s/%s: it does not exist, has none yet, or another instance (a shard) serves it.", ns, name))
}

// serveArtifact is the page of one KCLArtifact: status, diff, history, objects and YAML.
func (h *handler) serveArtifact(w http.ResponseWriter, r *http.Request) {
	obj, ok := h.lookup(w, r)
	if !ok {
		return
	}
	sel, err := selectEntries(obj, r.URL.Query())
	if err != nil {
		h.errorPage(w, http.StatusNotFound, "Not a kept artifact", err.Error())
		return
	}
	if !h.acquire(r) {
		w.Header().Set("Retry-After", "5")
		h.errorPage(w, http.StatusServiceUnavailable, "Busy", "Too many artifact pages are being built; retry in a moment.")
		return
	}
	defer h.release()
	var sensitive []string
	if h.sensitive != nil && !h.showSecrets {
		var err error
		if sensitive, err = h.sensitive(r.Context(), obj.Namespace, obj.Name); err != nil {
			h.errorPage(w, http.StatusServiceUnavailable, "Busy",
				"The values of this KCLArtifact's Secrets, which the page masks, cannot be read; retry in a moment.")
			return
		}
	}
	now := time.Now()
	page := h.buildArtifactPage(obj, sel, now, sensitive)
	page.Pipeline = h.pipelineOf(r.Context(), obj, now, sensitive)
	h.render(w, http.StatusOK, "artifact", page)
}

// serveDownload sends a kept artifact's tar.gz from this listener, for people who reach the
// view through a port-forward and cannot reach the artifact server's in-cluster URL.
func (h *handler) serveDownload(w http.ResponseWriter, r *http.Request) {
	obj, ok := h.lookup(w, r)
	if !ok {
		return
	}
	file := r.PathValue("file")
	e, found := archiveOf(obj, file)
	if !found || !archiveName.MatchString(file) {
		h.errorPage(w, http.StatusNotFound, "Not found", file+" is not a kept artifact of "+obj.Namespace+"/"+obj.Name+".")
		return
	}
	h.sendArchive(w, r, obj, e)
}

// archiveOf is the kept artifact, or the one a stage waits to publish, whose archive is file.
func archiveOf(obj *kclv1.KCLArtifact, file string) (kclv1.ArtifactHistoryEntry, bool) {
	entries := slices.Clone(historyOf(obj))
	if p := obj.Status.Promotion; p != nil {
		for _, w := range p.Waiting {
			entries = append(entries, waitingEntry(w))
		}
	}
	i := slices.IndexFunc(entries, func(e kclv1.ArtifactHistoryEntry) bool { return archiveFile(e) == file })
	if i < 0 {
		return kclv1.ArtifactHistoryEntry{}, false
	}
	return entries[i], true
}

// selection is what the page shows: the artifact whose objects and YAML are listed, and the
// two compared. Indexes into the history; -1 when there is none.
type selection struct {
	history        []kclv1.ArtifactHistoryEntry
	view, from, to int
}

// selectEntries reads ?view=, ?from= and ?to= (digests of kept artifacts). By default the
// current artifact is shown and compared with the one published before it: when pinned to a
// past artifact, that is the newest one, so the diff shows what the rollback changed.
func selectEntries(obj *kclv1.KCLArtifact, q url.Values) (selection, error) {
	s := selection{history: historyOf(obj), view: -1, from: -1, to: -1}
	if len(s.history) == 0 {
		return s, nil
	}
	cur := currentIndex(obj, s.history)
	prev := 1
	if cur > 0 {
		prev = 0
	}
	var err error
	for _, p := range []struct {
		param string
		def   int
		dst   *int
	}{{"view", cur, &s.view}, {"from", prev, &s.from}, {"to", cur, &s.to}} {
		if *p.dst, err = pick(s.history, q.Get(p.param), p.def); err != nil {
			return s, fmt.Errorf("%s=%s is not a kept artifact of %s/%s; kept: %s", p.param, q.Get(p.param), obj.Namespace, obj.Name, keptDigests(s.history))
		}
	}
	return s, nil
}

func pick(history []kclv1.ArtifactHistoryEntry, digest string, def int) (int, error) {
	if digest == "" {
		if def >= len(history) {
			return -1, nil
		}
		return def, nil
	}
	i := slices.IndexFunc(history, func(e kclv1.ArtifactHistoryEntry) bool { return e.Digest == digest })
	if i < 0 {
		return -1, fmt.Errorf("unknown digest %s", digest)
	}
	return i, nil
}

func keptDigests(history []kclv1.ArtifactHistoryEntry) string {
	d := make([]string, len(history))
	for i, e := range history {
		d[i] = e.Digest
	}
	return strings.Join(d, ", ")
}

// historyOf is status.history, or the current artifact alone when there is no history yet (a
// KCLArtifact last reconciled by a version without one).
func historyOf(obj *kclv1.KCLArtifact) []kclv1.ArtifactHistoryEntry {
	if len(obj.Status.History) > 0 || obj.Status.Artifact == nil {
		return obj.Status.History
	}
	a := obj.Status.Artifact
	return []kclv1.ArtifactHistoryEntry{{
		Digest: a.Digest, Revision: a.Revision, SourceRevision: obj.Status.SourceRevision, URL: a.URL,
		Size: a.Size, Objects: obj.Status.InventoryCount, LastPublished: a.LastUpdateTime,
	}}
}

// currentIndex is the entry of the published artifact; the newest when it is not listed.
func currentIndex(obj *kclv1.KCLArtifact, history []kclv1.ArtifactHistoryEntry) int {
	if a := obj.Status.Artifact; a != nil {
		if i := slices.IndexFunc(history, func(e kclv1.ArtifactHistoryEntry) bool { return e.Digest == a.Digest }); i >= 0 {
			return i
		}
	}
	return 0
}

// condView is a condition as the pages show it.
type condView struct {
	Status, Reason, Message string
	Class                   string // ok, fail, unknown or none: the badge colour
}

func condOf(obj *kclv1.KCLArtifact, typ string) condView {
	c := apimeta.FindStatusCondition(obj.Status.Conditions, typ)
	if c == nil {
		return condView{Status: "—", Class: "none"}
	}
	class := "unknown"
	switch c.Status {
	case metav1.ConditionTrue:
		class = "ok"
	case metav1.ConditionFalse:
		class = "fail"
	}
	return condView{Status: string(c.Status), Reason: c.Reason, Message: c.Message, Class: class}
}

// timeView is a time shown absolute (UTC) and relative to the page's.
type timeView struct{ ISO, Abs, Rel string }

func timeOf(t metav1.Time, now time.Time) timeView {
	if t.IsZero() {
		return timeView{}
	}
	u := t.UTC()
	return timeView{ISO: u.Format(time.RFC3339), Abs: u.Format("2006-01-02 15:04:05 UTC"), Rel: ago(now.Sub(u))}
}

func ago(d time.Duration) string {
	switch {
	case d < -5*time.Second:
		// a time to come: a gate that opens, a soak that ends
		return "in " + strings.TrimSuffix(ago(-d), " ago")
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// summary is a KCLArtifact's line in the list, and the head of its page.
type summary struct {
	Namespace, Name, Link    string
	Ready, Applied           condView
	Revision, SourceRevision string
	// LastAttempted is the source revision last tried, when it is not the current one (a
	// failed render): what a reviewer waits to see applied.
	LastAttempted string
	Updated       timeView
	Objects       int
	HasArtifact   bool
	Pinned        string
	Suspended     bool
	Source        string // kind namespace/name, path
	// Remediated is the condition of spec.remediation; RolledBack tells that the current
	// artifact was published again in place of a failed one (its reason RolledBack).
	Remediated condView
	RolledBack bool
	Quarantine *quarantineView
	// Exports are the values of spec.exports in the published artifact (status.exports), which
	// other KCLArtifacts of the namespace read.
	Exports []kclv1.ExportedValue
	// Upstream is the KCLArtifact a stage follows (spec.promotion.from), Gate its Promoted
	// condition and Waiting the number of artifacts it waits to publish.
	Upstream string
	Gate     condView
	Waiting  int
}

// quarantineView is the failed artifact spec.remediation rolled back from
// (status.remediation.quarantined).
type quarantineView struct {
	Digest, Revision, SourceRevision, RolledBackTo string
	Failure                                        failureView
	RolledBackAt                                   timeView
}

// failureView says where and why a published artifact failed.
type failureView struct{ Phase, Reason, Message string }

func failureOf(f *kclv1.ArtifactFailure) failureView {
	if f == nil {
		return failureView{}
	}
	return failureView{Phase: f.Phase, Reason: f.Reason, Message: f.Message}
}

func summarize(obj *kclv1.KCLArtifact, now time.Time) summary {
	s := summary{
		Namespace: obj.Namespace, Name: obj.Name, Link: pageLink(obj.Namespace, obj.Name),
		Ready: condOf(obj, meta.ReadyCondition), Applied: condOf(obj, kclv1.KustomizationReadyCondition),
		SourceRevision: obj.Status.SourceRevision, Objects: obj.Status.InventoryCount,
		Pinned: obj.Spec.PinnedDigest, Suspended: obj.Spec.Suspend, Source: sourceOf(obj),
		Exports: obj.Status.Exports,
	}
	if a := obj.Status.Artifact; a != nil {
		s.HasArtifact, s.Revision, s.Updated = true, a.Revision, timeOf(a.LastUpdateTime, now)
	}
	if la := obj.Status.LastAttemptedRevision; la != "" && la != s.SourceRevision {
		s.LastAttempted = la
	}
	if p := obj.Spec.Promotion; p != nil {
		s.Upstream, s.Gate = p.From.Name, condOf(obj, kclv1.PromotedCondition)
		if st := obj.Status.Promotion; st != nil {
			s.Waiting = len(st.Waiting)
		}
	}
	s.Remediated = condOf(obj, kclv1.RemediatedCondition)
	s.RolledBack = isRolledBack(obj)
	if r := obj.Status.Remediation; r != nil && r.Quarantined != nil {
		q := r.Quarantined
		s.Quarantine = &quarantineView{Digest: q.Digest, Revision: q.Revision, SourceRevision: q.SourceRevision,
			RolledBackTo: q.RolledBackTo, Failure: failureOf(&q.Failure), RolledBackAt: timeOf(q.RolledBackAt, now)}
	}
	return s
}

// isRolledBack tells whether the current artifact was published again by spec.remediation in
// place of a failed one.
func isRolledBack(obj *kclv1.KCLArtifact) bool {
	c := apimeta.FindStatusCondition(obj.Status.Conditions, kclv1.RemediatedCondition)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kclv1.RolledBackReason && obj.Status.Artifact != nil
}

func sourceOf(obj *kclv1.KCLArtifact) string {
	ref := obj.Spec.SourceRef
	ns := cmp.Or(ref.Namespace, obj.Namespace)
	s := ref.Kind + " " + ns + "/" + ref.Name
	if obj.Spec.Path != "" {
		s += ", path " + obj.Spec.Path
	}
	return s
}

type pageBase struct {
	Title       string
	ShowSecrets bool
}

func (h *handler) base(title string) pageBase {
	return pageBase{Title: title, ShowSecrets: h.showSecrets}
}

type indexPage struct {
	pageBase
	Rows  []summary
	Total int // KCLArtifacts in the cache, served here or not
}
