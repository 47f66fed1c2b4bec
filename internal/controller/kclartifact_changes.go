package controller

import (
	"fmt"
	"net/url"
	"path"
	"strings"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/yamldiff"
)

const (
	// maxChangeYAML bounds the YAML a new-artifact event compares; a larger pair is announced
	// without a summary (the diff URL still has it all).
	maxChangeYAML = 8 << 20
	// changedObjectsShown is how many changed objects a summary names.
	changedObjectsShown = 5
	// diffURLKey is the event metadata key of the artifact server's diff of a new artifact.
	diffURLKey = "diff"
)

// changeOf says what the current artifact changed against the one before it in the history, for
// the new-artifact event: counts and the first objects by kind and name, never a value; and the
// URL of the whole diff on the artifact server (Secrets masked there too). Both are empty when
// no earlier artifact is kept.
// sensitive are the argument values read from Secrets: an object named after one is masked.
func (r *KCLArtifactReconciler) changeOf(obj *kclv1.KCLArtifact, sensitive []string) (summary, diffURL string) {
	h, cur := obj.Status.History, obj.Status.Artifact
	if len(h) < 2 || cur == nil || h[0].Digest != cur.Digest {
		return "", ""
	}
	diffURL = artifactDiffURL(cur.URL, obj, h[1].Digest, h[0].Digest)
	if sensitive == nil && len(arguments.SecretInputs(obj)) > 0 {
		// the Secret values to mask are not known here: objects named after them stay unnamed
		return "", diffURL
	}
	from, err := r.Store.ReadYAMLFor(obj, r.Store.ArtifactOf(obj, h[1]), maxChangeYAML)
	if err != nil {
		return "", diffURL
	}
	to, err := r.Store.ReadYAMLFor(obj, *cur, maxChangeYAML)
	if err != nil {
		return "", diffURL
	}
	res, err := yamldiff.Diff(from, to, yamldiff.Options{Unlisted: true, Sensitive: sensitive})
	if err != nil {
		return "", diffURL
	}
	return changeSummary(res), diffURL
}

// changeSummary is "2 changed, 1 added: Deployment/apps/podinfo, ConfigMap/apps/a, …".
func changeSummary(res yamldiff.Result) string {
	added, removed, changed := res.Counts()
	var counts []string
	for _, c := range []struct {
		n    int
		what string
	}{{changed, "changed"}, {added, "added"}, {removed, "removed"}} {
		if c.n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(counts) == 0 {
		return "no object changed"
	}
	var ids []string
	for i, o := range res.Objects {
		if i == changedObjectsShown {
			ids = append(ids, "…")
			break
		}
		ids = append(ids, o.ID())
	}
	return strings.Join(counts, ", ") + ": " + strings.Join(ids, ", ")
}

// artifactDiffURL is the artifact server's diff of two kept artifacts, at the address the
// artifact URL has.
func artifactDiffURL(artifactURL string, obj *kclv1.KCLArtifact, from, to string) string {
	u, err := url.Parse(artifactURL)
	if err != nil {
		return ""
	}
	u.Path = path.Join("/", artifactstore.Dir(obj), "diff")
	// the query keeps the object's token: the diff is served only with it
	q := u.Query()
	q.Set("from", from)
	q.Set("to", to)
	u.RawQuery = q.Encode()
	return u.String()
}
