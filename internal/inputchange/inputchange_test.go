package inputchange

import (
	"strings"
	"testing"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func TestChanges(t *testing.T) {
	from := []kclv1.InputValue{{Name: "web.tag", Value: "1.4.2"}, {Name: "db.password", Value: Masked}, {Name: "old", Value: "x"}}
	to := []kclv1.InputValue{{Name: "web.tag", Value: "1.4.3"}, {Name: "db.password", Value: Masked}, {Name: "new", Value: "y\x1b[2J"}}
	if got, want := Text(Changes(from, to), 5), `new = y\x1b[2J (new), old removed, web.tag 1.4.2 → 1.4.3`; got != want {
		t.Errorf("changes:\n got %s\nwant %s", got, want)
	}
	if got, want := Text(Changes(from, to), 1), `new = y\x1b[2J (new), … (2 more)`; got != want {
		t.Errorf("at most one:\n got %s\nwant %s", got, want)
	}
	if Changes(nil, to) != nil || Changes(from, nil) != nil {
		t.Error("an entry recorded before inputs were claims changes")
	}
}

func TestMaskAndCut(t *testing.T) {
	c := Change{Name: "copy", From: "pw=hunter2", To: "pw=hunter3"}.Mask([]string{"hunter2", "hunter3", ""})
	if got := c.String(); got != "copy pw=*** → pw=***" {
		t.Errorf("masked: %s", got)
	}
	long := strings.Repeat("é", 40) + "x"
	got := Change{Name: "n", From: "a", To: long}.String()
	if !strings.HasSuffix(got, "…") || strings.Contains(got, "\uFFFD") || len(got) > len("n a → ")+64 {
		t.Errorf("cut: %q", got)
	}
}

// Lines masks a Secret's value copied into another input and escapes each change to one line;
// an entry recorded before inputs were claims no change.
func TestLines(t *testing.T) {
	from := kclv1.ArtifactHistoryEntry{Inputs: []kclv1.InputValue{{Name: "note", Value: "a"}, {Name: "web.tag", Value: "1.4.2"}}}
	to := kclv1.ArtifactHistoryEntry{Inputs: []kclv1.InputValue{{Name: "copy", Value: "pw=hunter2"}, {Name: "note", Value: "b\nc"}, {Name: "web.tag", Value: "1.4.3"}}}
	got := strings.Join(Lines(from, to, []string{"hunter2"}), "|")
	if want := `copy = pw=*** (new)|note a → b\nc|web.tag 1.4.2 → 1.4.3`; got != want {
		t.Errorf("lines:\n got %s\nwant %s", got, want)
	}
	if lines := Lines(kclv1.ArtifactHistoryEntry{}, to, nil); len(lines) != 0 {
		t.Errorf("changes claimed against an entry without inputs: %q", lines)
	}
}
