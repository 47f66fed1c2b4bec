package ui

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// rolledBack is team-a/rb after spec.remediation rolled v3 back: v1 (healthy) is served again,
// v3 failed its health checks in main and is quarantined, v2 was replaced before it was applied,
// and v0's file did not survive a restart (missing: true; its file is still there, with another
// content, to check that the flag is what the view goes by).
type rolledBack struct {
	*fixture
	obj            *kclv1.KCLArtifact
	v0, v1, v2, v3 kclv1.ArtifactHistoryEntry
	failure        string
}

func newRolledBack(t *testing.T) *rolledBack {
	t.Helper()
	f := newFixture(t)
	t0 := time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)
	rb := &rolledBack{fixture: f, obj: newObj("team-a", "rb")}
	rb.obj.Spec.Remediation = &kclv1.Remediation{Retries: 1, Strategy: kclv1.RollbackStrategy}
	store := func(n int, version string) kclv1.ArtifactHistoryEntry {
		src := "main@sha1:" + strings.Repeat(string(rune('a'+n)), 40)
		return storeArtifact(t, f.root, rb.obj, src, manifestsV("team-a", version, secretV1, n == 3), 2, t0.Add(time.Duration(n)*time.Hour))
	}
	rb.v0, rb.v1, rb.v2, rb.v3 = store(0, "0"), store(1, "1"), store(2, "2"), store(3, "3")
	healthy := func(e *kclv1.ArtifactHistoryEntry, at time.Time) {
		e.Health, e.HealthyAt = kclv1.HealthHealthy, &metav1.Time{Time: at}
	}
	healthy(&rb.v0, t0.Add(5*time.Minute))
	rb.v0.Missing = true
	healthy(&rb.v1, t0.Add(time.Hour+5*time.Minute))
	rb.v2.Health = kclv1.HealthNotApplied
	rb.failure = "health check failed after 2m0s: Deployment/team-a/app " + evil + "\nnot ready: 0/2 replicas"
	failed := kclv1.ArtifactFailure{Phase: "main", Reason: "HealthCheckFailed", Message: rb.failure, At: metav1.NewTime(t0.Add(3*time.Hour + 2*time.Minute))}
	rb.v3.Health, rb.v3.Failure = kclv1.HealthFailed, &failed

	// v1 published again: current, listed first; v3 newest of the others
	rb.v1.LastPublished = metav1.NewTime(t0.Add(3*time.Hour + 3*time.Minute))
	publish(rb.obj, rb.v1, rb.v3, rb.v2, rb.v0)
	rb.obj.Status.Remediation = &kclv1.RemediationStatus{Digest: rb.v3.Digest, Failures: 2, Quarantined: &kclv1.QuarantinedArtifact{
		Digest: rb.v3.Digest, Revision: rb.v3.Revision, SourceRevision: rb.v3.SourceRevision, TemplateDigest: "sha256:template",
		Failure: failed, RolledBackTo: rb.v1.Digest, RolledBackAt: rb.v1.LastPublished,
	}}
	setReady(rb.obj, metav1.ConditionFalse, kclv1.RolledBackReason, "revision "+rb.v3.SourceRevision+" failed; serving "+rb.v1.SourceRevision)
	rb.obj.Status.Conditions = append(rb.obj.Status.Conditions, metav1.Condition{
		Type: kclv1.RemediatedCondition, Status: metav1.ConditionTrue, Reason: kclv1.RolledBackReason,
		Message: "rolled back from " + rb.v3.Revision + " " + evil, LastTransitionTime: metav1.Now(),
	})
	f.reader.objs = append(f.reader.objs, rb.obj)
	return rb
}

// historyTableRows are the rows of the history table, the header's first.
func historyTableRows(t *testing.T, page string, entries int) []string {
	t.Helper()
	hist := between(t, page, `id="history-table"`, `</table>`)
	rows := strings.Split(hist, "<tr")[1:]
	if len(rows) != entries+1 {
		t.Fatalf("history rows: %d, want %d\n%s", len(rows)-1, entries, hist)
	}
	return rows
}

// The history shows what became of each artifact, which one failed and was quarantined, which
// one is served again in its place, and which ones storage lost.
func TestHistoryShowsHealthRollbackAndMissingEntries(t *testing.T) {
	rb := newRolledBack(t)
	srv := rb.server(t, Options{})
	code, _, page := get(t, srv, "/kclartifact/team-a/rb/")
	if code != http.StatusOK {
		t.Fatalf("GET: %d\n%s", code, page)
	}
	expectEscaped(t, "the page", page)
	rows := historyTableRows(t, page, 4)
	expectContains(t, "the history's header", text(rows[0]), "Health")

	v1 := text(rows[1])
	expectContains(t, "the entry rolled back to", v1, rb.v1.Revision, "Healthy since 2025-03-04 11:05:00 UTC", "current", "rolled back to")
	expectNotContains(t, "the entry rolled back to", v1, "quarantined", "missing")

	v3 := text(rows[2])
	expectContains(t, "the failed entry", v3, rb.v3.Revision, "Failed in phase main: HealthCheckFailed: "+rb.failure, "quarantined")
	expectNotContains(t, "the failed entry", v3, "current", "rolled back to", "Healthy")

	expectContains(t, "the entry replaced before it was applied", text(rows[3]), rb.v2.Revision, "Not applied")

	v0 := text(rows[4])
	expectContains(t, "the missing entry", v0, rb.v0.Revision, "Healthy since 2025-03-04 10:05:00 UTC", "missing from storage")
	expectNotContains(t, "the missing entry", rows[4], `href="`+archiveFile(rb.v0)+`"`)
	expectContains(t, "the present entries", page, `href="`+archiveFile(rb.v1)+`"`, `href="`+archiveFile(rb.v3)+`"`)

	// the status: rolled back, why, and from what
	status := text(between(t, page, `id="status"`, `</div>`))
	expectContains(t, "the status", status, "Remediated", "True RolledBack", "rolled back from "+rb.v3.Revision+" "+evil,
		"published again in place of a failed artifact")
	expectNotContains(t, "the status", status, "a failed attempt leaves the last good artifact in place")
	quarantined := text(between(t, page, `id="quarantined"`, `</dd>`))
	expectContains(t, "the quarantine", quarantined, rb.v3.Revision, rb.v3.SourceRevision,
		"Failed in phase main: HealthCheckFailed: "+rb.failure, "rolled back to "+rb.v1.Digest)
	expectContains(t, "the heading", text(between(t, page, "<h1>", "</h1>")), "rolled back")

	// the default diff: what the rollback undid, the health of both ends beside it
	expectContains(t, "the diff", between(t, page, `id="diff-from"`, `</code>`), rb.v3.Revision)
	expectContains(t, "the diff's from", text(between(t, page, `id="diff-from-health"`, `</td>`)), "Failed in phase main: HealthCheckFailed: "+rb.failure)
	expectContains(t, "the diff's to", text(between(t, page, `id="diff-to-health"`, `</td>`)), "Healthy since 2025-03-04 11:05:00 UTC")
	expectDiffLines(t, page, []diffLine{{"del", `-  version: "3"`}, {"add", `+  version: "1"`}})
	expectContains(t, "the compare form", text(between(t, page, `<select name="from">`, `</select>`)), "(quarantined)", "(missing)")

	// the list says it too
	_, _, index := get(t, srv, "/")
	expectContains(t, "the list", text(between(t, index, `id="ka-team-a-rb"`, `</tr>`)), "rolled back")
	expectNotContains(t, "the list", text(between(t, index, `id="ka-team-a-app"`, `</tr>`)), "rolled back")
	expectEscaped(t, "the list", index)
}

// A missing entry is not shown, compared or downloaded: a file under its name may hold another
// content.
func TestMissingEntriesAreNotRead(t *testing.T) {
	rb := newRolledBack(t)
	srv := rb.server(t, Options{})
	want := "artifact " + rb.v0.Revision + " is missing from storage"
	code, _, page := get(t, srv, "/kclartifact/team-a/rb/?view="+url.QueryEscape(rb.v0.Digest))
	if code != http.StatusOK {
		t.Fatalf("GET: %d", code)
	}
	expectContains(t, "the objects of a missing entry", text(between(t, page, `id="objects"`, `</main>`)), want)
	expectNotContains(t, "the objects of a missing entry", text(between(t, page, `id="objects"`, `</main>`)), `version: "0"`)

	_, _, page = get(t, srv, "/kclartifact/team-a/rb/?from="+url.QueryEscape(rb.v0.Digest))
	expectContains(t, "a diff from a missing entry", text(between(t, page, `id="changes"`, `id="history"`)), want)

	code, _, page = get(t, srv, "/kclartifact/team-a/rb/"+archiveFile(rb.v0))
	if code != http.StatusNotFound {
		t.Errorf("downloading a missing entry: %d, want 404", code)
	}
	expectContains(t, "downloading a missing entry", text(page), want)
}

// Progressing, and entries without health (no Kustomization generated, or published before
// health was recorded); no remediation, no rollback marks.
func TestHistoryShowsProgressingAndNoHealth(t *testing.T) {
	f := newFixture(t)
	f.app.Status.History[0].Health = kclv1.HealthProgressing
	srv := f.server(t, Options{})
	_, _, page := get(t, srv, "/kclartifact/team-a/app/")
	rows := historyTableRows(t, page, 2)
	expectContains(t, "the current entry", text(rows[1]), "Progressing", "current")
	expectNotContains(t, "the entry without health", text(rows[2]), "Progressing", "Healthy", "Failed", "Not applied")
	expectContains(t, "the entry without health", text(rows[2]), "—")
	expectNotContains(t, "the page", text(page), "rolled back", "quarantined", "Quarantined", "Remediated", "missing from storage")
	// a Remediated condition other than RolledBack is shown, and is no rollback
	f.app.Status.Conditions = append(f.app.Status.Conditions, metav1.Condition{Type: kclv1.RemediatedCondition,
		Status: metav1.ConditionFalse, Reason: kclv1.NothingToRollBackToReason, Message: "no healthy artifact to roll back to"})
	_, _, page = get(t, srv, "/kclartifact/team-a/app/")
	expectContains(t, "the status", text(between(t, page, `id="remediated"`, `</dd>`)), "False NothingToRollBackTo", "no healthy artifact to roll back to")
	expectNotContains(t, "the page", text(page), "rolled back to", "(spec.remediation)")
}
