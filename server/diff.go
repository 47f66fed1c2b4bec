package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
	"github.com/kcl-flux/kcl-artifact-controller/internal/tarball"
	"github.com/kcl-flux/kcl-artifact-controller/internal/yamldiff"
)

// serveDiff answers a unified diff, object by object, between two kept artifacts of a
// KCLArtifact: ?from=<digest>&to=<digest>, by default the previous one and the latest. Comment
// lines come first: the pair, the health of each (status.history[].health), the inputs that
// changed between them (status.history[].inputs, "# input: web.tag 1.4.2 → 1.4.3"), then the
// summary.
func (h *handler) serveDiff(w http.ResponseWriter, r *http.Request, ns, name string) {
	var history []kclv1.ArtifactHistoryEntry
	var err error
	if h.history != nil {
		history, err = h.history(r.Context(), ns, name)
	}
	if h.history == nil || err != nil || len(history) == 0 {
		http.Error(w, "no artifact history for "+ns+"/"+name, http.StatusNotFound)
		return
	}
	from, to, err := pickPair(slices.Concat(history, h.waitingOf(r.Context(), ns, name)), len(history), r.URL.Query().Get("from"), r.URL.Query().Get("to"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	select {
	case h.views <- struct{}{}:
		defer func() { <-h.views }()
	default:
		http.Error(w, "too many views in progress, retry later", http.StatusServiceUnavailable)
		return
	}
	var sensitive []string
	if h.sensitive != nil && !h.showSecrets {
		if sensitive, err = h.sensitive(r.Context(), ns, name); err != nil {
			http.Error(w, "the values of the KCLArtifact's Secrets, which a diff masks, cannot be read; retry later",
				http.StatusServiceUnavailable)
			return
		}
	}
	out, status, err := h.diff(ns, name, from, to, sensitive)
	if err != nil {
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	fmt.Fprintf(w, "# %s/%s: %s (%s) -> %s (%s)\n", ns, name, from.Revision, from.SourceRevision, to.Revision, to.SourceRevision)
	_, _ = io.WriteString(w, healthComment("from", from)+healthComment("to", to)+inputsComment(from, to, sensitive))
	_, _ = w.Write([]byte(out))
}

// healthComment is the health of a kept artifact as comment lines: "# from: Healthy since
// <time>", "# to: Failed in phase main: <reason>: <message>". Each line of a message is a comment
// line of its own, so that no message can pass for a line of the diff.
func healthComment(end string, e kclv1.ArtifactHistoryEntry) string {
	var s string
	switch e.Health {
	case "":
		s = "health not recorded"
	case kclv1.HealthHealthy:
		s = e.Health
		if e.HealthyAt != nil {
			s += " since " + e.HealthyAt.UTC().Format(time.RFC3339)
		}
	case kclv1.HealthFailed:
		s = e.Health
		if f := e.Failure; f != nil {
			if f.Phase != "" {
				s += " in phase " + f.Phase
			}
			for _, part := range []string{f.Reason, f.Message} {
				if part != "" {
					s += ": " + part
				}
			}
		}
	case kclv1.HealthNotApplied:
		s = "Not applied"
	default:
		s = e.Health
	}
	lines := strings.Split(strings.ReplaceAll(strings.TrimRight(s, "\r\n"), "\r", ""), "\n")
	return "# " + end + ": " + strings.Join(lines, "\n#   ") + "\n"
}

// inputsComment is inputchange.Lines as comment lines of the diff, after the health of both ends.
func inputsComment(from, to kclv1.ArtifactHistoryEntry, sensitive []string) string {
	var s string
	for _, l := range inputchange.Lines(from, to, sensitive) {
		s += "# input: " + l + "\n"
	}
	return s
}

// diff compares two kept artifacts of ns/name, each read from the file the store verified (the
// history only names them); the status is the HTTP status of a failure.
func (h *handler) diff(ns, name string, from, to kclv1.ArtifactHistoryEntry, sensitive []string) (string, int, error) {
	var yamls [2][]byte
	for i, e := range []kclv1.ArtifactHistoryEntry{from, to} {
		if e.Missing {
			// A file under its name may hold another content (a digest mismatch).
			return "", http.StatusNotFound, fmt.Errorf("artifact %s is missing from storage: its file is gone or no longer has its digest", e.Revision)
		}
		f, _, err := h.store.Open(ns, name, artifactstore.FileName(e.URL))
		if notServed(err) {
			return "", http.StatusNotFound, fmt.Errorf("artifact %s is not served: %w", e.Revision, err)
		}
		if err != nil {
			return "", http.StatusInternalServerError, fmt.Errorf("cannot read artifact %s", e.Revision)
		}
		y, err := tarball.ReadYAML(f, h.maxDiff)
		f.Close()
		if errors.Is(err, tarball.ErrTooLarge) {
			return "", http.StatusRequestEntityTooLarge, fmt.Errorf("artifact %s: %w; download the .tar.gz instead", e.Revision, err)
		}
		if err != nil {
			return "", http.StatusInternalServerError, fmt.Errorf("cannot read artifact %s", e.Revision)
		}
		yamls[i] = y
	}
	res, err := yamldiff.Diff(yamls[0], yamls[1], yamldiff.Options{ShowSecrets: h.showSecrets, Sensitive: sensitive})
	if err != nil {
		return "", http.StatusInternalServerError, err
	}
	return res.String(), http.StatusOK, nil
}

// waitingOf is a stage's waiting artifacts, none when they cannot be read.
func (h *handler) waitingOf(ctx context.Context, ns, name string) []kclv1.ArtifactHistoryEntry {
	if h.waiting == nil {
		return nil
	}
	waiting, err := h.waiting(ctx, ns, name)
	if err != nil {
		return nil
	}
	return waiting
}

// pickPair finds the two entries to compare: the history's first published ones, then a stage's
// waiting ones; empty digests mean the previous and the latest published artifact.
func pickPair(kept []kclv1.ArtifactHistoryEntry, published int, from, to string) (a, b kclv1.ArtifactHistoryEntry, err error) {
	find := func(d string, def int) (kclv1.ArtifactHistoryEntry, error) {
		i := def
		if d != "" {
			i = slices.IndexFunc(kept, func(e kclv1.ArtifactHistoryEntry) bool { return e.Digest == d })
		}
		if i < 0 || i >= len(kept) || (d == "" && i >= published) {
			if d == "" {
				return kclv1.ArtifactHistoryEntry{}, errors.New("there is no previous artifact to compare with")
			}
			return kclv1.ArtifactHistoryEntry{}, fmt.Errorf("%s is not a kept artifact; kept: %s", d, digests(kept))
		}
		return kept[i], nil
	}
	if a, err = find(from, 1); err != nil {
		return a, b, err
	}
	b, err = find(to, 0)
	return a, b, err
}

func digests(history []kclv1.ArtifactHistoryEntry) string {
	var d []string
	for _, e := range history {
		d = append(d, e.Digest)
	}
	return strings.Join(d, ", ")
}
