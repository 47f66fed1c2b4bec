package ui

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
	"github.com/kcl-flux/kcl-artifact-controller/internal/yamldiff"
)

type artifactPage struct {
	pageBase
	S            summary
	HistoryLimit int
	History      []historyRow
	View         viewSection
	Diff         diffSection
	// Pipeline is the chain of stages the KCLArtifact is in, nil when it is in none.
	Pipeline *pipelineView
}

// historyRow is a kept artifact in the history table and the compare form.
type historyRow struct {
	kclv1.ArtifactHistoryEntry
	N               int // 1 is the newest
	Current, Pinned bool
	File            string // the archive's name, downloaded from this listener
	Published       timeView
	Size            string
	// ViewLink shows its objects; DiffLink compares it with the entry before it.
	ViewLink, DiffLink string
	Health             healthView
	// Quarantined: the failed artifact spec.remediation rolled back from; RolledBackTo: the
	// current artifact, published again in its place.
	Quarantined, RolledBackTo bool
}

// healthView is what became of a kept artifact once published (status.history[].health).
type healthView struct {
	State   string // kclv1.Health*, "" when none is recorded
	Class   string // the badge colour
	Since   timeView
	Failure failureView
}

func healthOf(e kclv1.ArtifactHistoryEntry, now time.Time) healthView {
	h := healthView{State: e.Health, Class: "none"}
	switch e.Health {
	case kclv1.HealthHealthy:
		h.Class = "ok"
		if e.HealthyAt != nil {
			h.Since = timeOf(*e.HealthyAt, now)
		}
	case kclv1.HealthFailed:
		h.Class, h.Failure = "fail", failureOf(e.Failure)
	case kclv1.HealthProgressing:
		h.Class = "unknown"
	}
	return h
}

// viewSection lists the objects of one kept artifact, with their YAML.
type viewSection struct {
	Row     *historyRow
	Objects []objectView
	Err     string
}

type objectView struct {
	Anchor                            string
	APIVersion, Kind, Namespace, Name string
	Phase                             string // the deploy phase, "" for main
	Secret                            bool
	YAML                              template.HTML // highlighted, every value escaped
}

// diffSection compares two kept artifacts, object by object.
type diffSection struct {
	From, To                           *historyRow
	FromDigest, ToDigest, ViewDigest   string // for the compare form
	Added, Removed, Changed, Unchanged int
	Objects                            []diffObject
	// Inputs are the inputs that changed from one to the other ("web.tag 1.4.2 → 1.4.3"),
	// masked as /diff masks them; none when either predates recorded inputs.
	Inputs    []string
	Err, Note string
}

type diffObject struct {
	Anchor, Op, Kind, Namespace, Name string
	Phase                             string // see yamldiff.Object
	Lines                             []diffLine
}

func (h *handler) buildArtifactPage(obj *kclv1.KCLArtifact, sel selection, now time.Time, sensitive []string) artifactPage {
	page := artifactPage{
		pageBase: h.base(obj.Namespace + "/" + obj.Name), S: summarize(obj, now),
		HistoryLimit: obj.GetHistoryLimit(), History: historyRows(obj, sel, now),
	}
	cache := h.newYAMLCache(obj)
	cache.sensitive = sensitive
	page.View = h.viewOf(cache, page.History, sel.view)
	page.Diff = h.diffOf(cache, page.History, sel)
	return page
}

func historyRows(obj *kclv1.KCLArtifact, sel selection, now time.Time) []historyRow {
	cur := currentIndex(obj, sel.history)
	rolledBack := isRolledBack(obj)
	var quarantined string
	if r := obj.Status.Remediation; r != nil && r.Quarantined != nil {
		quarantined = r.Quarantined.Digest
	}
	rows := make([]historyRow, len(sel.history))
	for i, e := range sel.history {
		current := i == cur && obj.Status.Artifact != nil
		rows[i] = historyRow{
			ArtifactHistoryEntry: e, N: i + 1, Current: current,
			Pinned: obj.Spec.PinnedDigest != "" && e.Digest == obj.Spec.PinnedDigest,
			File:   archiveFile(e), Published: timeOf(e.LastPublished, now), Size: "—",
			ViewLink:     query(e.Digest, digestAt(sel.history, sel.from), digestAt(sel.history, sel.to), "objects"),
			Health:       healthOf(e, now),
			Quarantined:  quarantined != "" && e.Digest == quarantined,
			RolledBackTo: current && rolledBack,
		}
		if e.Size != nil {
			rows[i].Size = humanBytes(*e.Size)
		}
		if i+1 < len(sel.history) {
			rows[i].DiffLink = query(digestAt(sel.history, sel.view), sel.history[i+1].Digest, e.Digest, "changes")
		}
	}
	return rows
}

// query is the link to this page showing view and comparing from with to.
func query(view, from, to, anchor string) string {
	q := url.Values{}
	for k, v := range map[string]string{"view": view, "from": from, "to": to} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return "?" + q.Encode() + "#" + anchor
}

func digestAt(history []kclv1.ArtifactHistoryEntry, i int) string {
	if i < 0 {
		return ""
	}
	return history[i].Digest
}

func rowAt(rows []historyRow, i int) *historyRow {
	if i < 0 {
		return nil
	}
	return &rows[i]
}

// archiveFile is the name of a kept artifact's archive in its directory.
func archiveFile(e kclv1.ArtifactHistoryEntry) string { return artifactstore.FileName(e.URL) }

// viewOf lists the objects of the artifact at index i, Secrets masked unless asked otherwise.
func (h *handler) viewOf(cache *yamlCache, rows []historyRow, i int) viewSection {
	v := viewSection{Row: rowAt(rows, i)}
	if v.Row == nil {
		return v
	}
	data, err := cache.get(v.Row.ArtifactHistoryEntry)
	if err != nil {
		v.Err = err.Error()
		return v
	}
	objs, err := manifests.Parse(data, 0)
	if err != nil {
		v.Err = fmt.Sprintf("the YAML of artifact %s cannot be read as objects: %v", v.Row.Revision, err)
		return v
	}
	for n, o := range objs {
		shown := o
		if !h.showSecrets {
			shown = yamldiff.MaskValues(yamldiff.Mask(o), cache.sensitive)
		}
		b, err := yaml.Marshal(shown.Object)
		if err != nil {
			v.Err = err.Error()
			return v
		}
		ref := manifests.Reference(o)
		v.Objects = append(v.Objects, objectView{
			Anchor: fmt.Sprintf("obj-%d", n+1), APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: ref.Namespace,
			Name: ref.Name, Phase: phaseLabel(o), Secret: yamldiff.IsSecret(o), YAML: highlightYAML(b),
		})
	}
	return v
}

// phaseLabel is an object's deploy phase, "" for main.
func phaseLabel(o *unstructured.Unstructured) string {
	if p := manifests.PhaseOf(o); p != phases.Main {
		return string(p)
	}
	return ""
}

// diffOf compares the selected pair of kept artifacts.
func (h *handler) diffOf(cache *yamlCache, rows []historyRow, sel selection) diffSection {
	d := diffSection{From: rowAt(rows, sel.from), To: rowAt(rows, sel.to),
		FromDigest: digestAt(sel.history, sel.from), ToDigest: digestAt(sel.history, sel.to), ViewDigest: digestAt(sel.history, sel.view)}
	if d.From == nil || d.To == nil {
		d.Note = "Only one artifact is kept so far: there is nothing to compare it with yet."
		return d
	}
	// the history says why: shown even when a file cannot be read
	d.Inputs = inputchange.Lines(d.From.ArtifactHistoryEntry, d.To.ArtifactHistoryEntry, cache.sensitive)
	from, err := cache.get(d.From.ArtifactHistoryEntry)
	if err != nil {
		d.Err = err.Error()
		return d
	}
	to, err := cache.get(d.To.ArtifactHistoryEntry)
	if err != nil {
		d.Err = err.Error()
		return d
	}
	res, err := yamldiff.Diff(from, to, yamldiff.Options{ShowSecrets: h.showSecrets, Sensitive: cache.sensitive})
	if err != nil {
		d.Err = err.Error()
		return d
	}
	d.Added, d.Removed, d.Changed = res.Counts()
	d.Unchanged = res.Unchanged
	for n, o := range res.Objects {
		d.Objects = append(d.Objects, diffObject{Anchor: fmt.Sprintf("diff-%d", n+1), Op: string(o.Op),
			Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Phase: o.Phase, Lines: diffLines(o.Unified)})
	}
	return d
}

// sendArchive sends the archive of a kept artifact.
func (h *handler) sendArchive(w http.ResponseWriter, r *http.Request, obj *kclv1.KCLArtifact, e kclv1.ArtifactHistoryEntry) {
	f, fi, err := h.openArchive(obj, e)
	if err != nil {
		h.errorPage(w, http.StatusNotFound, "Not found", err.Error())
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", obj.Namespace+"-"+obj.Name+"-"+archiveFile(e)))
	http.ServeContent(w, r, "", fi.ModTime(), f)
}
