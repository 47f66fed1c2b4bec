package fluxkcl

import "testing"

func TestImageTag(t *testing.T) {
	for image, want := range map[string]string{
		"ghcr.io/kcl-flux/kcl-artifact-controller:v1.2.3":                   "v1.2.3",
		"localhost:5000/kcl-artifact-controller:dev":                        "dev",
		"ghcr.io/kcl-flux/kcl-artifact-controller:v1.2.3@sha256:0123456789": "v1.2.3",
		"localhost:5000/kcl-artifact-controller":                            "unknown",
		"ghcr.io/kcl-flux/kcl-artifact-controller@sha256:0123456789":        "unknown",
	} {
		if got := imageTag(image); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", image, got, want)
		}
	}
}
