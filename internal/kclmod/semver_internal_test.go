package kclmod

import (
	"strings"
	"testing"
)

// semver.org's precedence example, in order, and versions that are not semver.
func TestLatestVersionIsSemverPrecedence(t *testing.T) {
	ordered := []string{"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
		"1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"}
	for i := 1; i < len(ordered); i++ {
		// the later one wins whichever order the registry lists them in
		for _, tags := range [][]string{{ordered[i-1], ordered[i]}, {ordered[i], ordered[i-1]}} {
			if got := latestVersion(tags); got != ordered[i] {
				t.Errorf("latest of %v = %q, want %q", tags, got, ordered[i])
			}
		}
	}
	for tags, want := range map[string]string{
		"1.0.0-rc.9 1.0.0-rc.10": "1.0.0-rc.10",
		"v1.2.3 1.10.0 1.9.0":    "1.10.0",
		"latest main 0.1.0":      "0.1.0",
		"01.2.3 1.2.3-01":        "", // leading zeros are not semver
		"1.2 1.2.3.4":            "",
		"":                       "",
	} {
		if got := latestVersion(strings.Fields(tags)); got != want {
			t.Errorf("latest of %q = %q, want %q", tags, got, want)
		}
	}
}
